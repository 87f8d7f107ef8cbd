"""The deterministic simulator of a KRaft quorum: `params` (a run's parameters, drawn from
its seed), `simulation` (one run of the raft workload), `controller` (the controller
workload), `run` (`run_seed`, `run_seeds` and the command line, `python -m kraftcore.sim`),
and the parts they are made of: `scheduler`, `network`, `faults`, `node`, `workload`,
`state_machine`, `invariants`, `history`, `hostile`."""
