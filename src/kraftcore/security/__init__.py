"""Who may talk to the cluster: principals, SASL mechanisms (PLAIN, SCRAM-SHA-256/512), ACLs
and the authorizer that checks them (Kafka's StandardAuthorizer rules).

Everything here is sans-I/O and deterministic: randomness (SCRAM nonces and salts) is passed
in, and TLS contexts, sockets and files belong to `kraftcore.net` and `kraftcore.runtime`.
"""
