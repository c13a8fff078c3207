"""The client's version, in a module of its own: the transport's User-Agent reads it without
importing the package's ``__init__`` (which imports the transport), and the packaging reads it
from here (pyproject.toml)."""

__version__ = "0.1.0"
