"""Processes and real time: the node driver and the clock every other layer takes as input."""
