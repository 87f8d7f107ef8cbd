"""The deterministic simulator of a KRaft quorum."""

# The simulator's entry points (`kraftcore.sim.run`), loaded on first use so that importing
# `kraftcore.sim.storage` alone does not load the whole simulator.
_RUN_EXPORTS = ("SimParams", "SimResult", "SimStats", "params_for_seed", "run_seed",
                "run_seeds")


def __getattr__(name):
    if name in _RUN_EXPORTS:
        from kraftcore.sim import run

        return getattr(run, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
