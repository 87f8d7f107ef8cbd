"""Helpers the tests share (none of them is collected as a test):

* `quorum`: a deterministic, hand-driven cluster of `RaftCore`s over their own storages
  (in memory, or on files) with a transcript of every event, and `drain`, the one loop that
  takes a core's Readys as `kraftcore.raft.types` says;
* `transcript`: how messages and states are written in a transcript, and the assertions
  that read it;
* `drivers`: a quorum of real `RaftDriver`s on 127.0.0.1 sockets and files;
* `storage`: building Raft storages of either kind for the storage contract tests.
"""
