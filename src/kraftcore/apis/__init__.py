"""The Kafka requests each role of a node answers, in the spirit of Kafka's `ControllerApis`
and `KafkaApis`: `controller` (the controller role's RPCs), `broker` (what a broker answers
itself), `reads` (answers any role reads from its committed image), `errors` (whole-request
error answers of any request) and `dispatch` (one role's table from API key to handler, and
the rules every answer keeps). Sans-I/O: a handler takes a decoded request and a facade and
returns the response message; the listener (`kraftcore.net`) and the node
(`kraftcore.runtime.node`) own the sockets."""
