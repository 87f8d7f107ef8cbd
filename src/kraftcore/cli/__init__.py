"""The `kraftcore` command line."""
