"""The read side the gateway serves: listings, directory, hosts, throughput, tails."""
