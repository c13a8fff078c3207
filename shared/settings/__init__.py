"""Settings from the environment: the variables, their parsing, their table."""
