"""TaskForge's tests: run them with bin/test."""
