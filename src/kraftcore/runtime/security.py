"""A node's security at run time: the `ListenerSecurity` of each of its listeners (TLS
contexts, SASL sessions over the metadata image's SCRAM credentials and the PLAIN users of
the JAAS text), the options of its client connections to other nodes, and the authorizer
kept up to date with the image's ACLs.

The settings are `kraftcore.runtime.security_config`'s; the rules of who may do what are
`kraftcore.security.authorizer`'s and `kraftcore.apis.authorization`'s. This module reads
the key files (when a listener or a client context is built) and draws SCRAM nonces and
salts from `secrets`.
"""

import secrets

from kraftcore.net import ListenerSecurity
from kraftcore.net.tls import PrincipalMapper, client_context, server_context
from kraftcore.security.authorizer import Authorizer
from kraftcore.security.plain import PLAIN, PlainServer
from kraftcore.security.sasl import SaslServerSession, client_exchange
from kraftcore.security.scram import ScramCredential, ScramServer, mechanism

__all__ = ["NodeSecurity"]

_NONCE_BYTES = 24


def _nonce():
    return secrets.token_bytes(_NONCE_BYTES)


class NodeSecurity:
    """What one node needs to authenticate and authorize. `image()` returns the node's
    current metadata image (for SCRAM credentials and ACLs)."""

    def __init__(self, config, image):
        self.settings = config.security
        self._image = image
        self._fake_salt_key = secrets.token_bytes(32)  # one per process (see ScramServer)
        self.authorizer = None
        if self.settings.authorizer_enabled:
            self.authorizer = Authorizer(
                super_users=[str(p) for p in self.settings.super_users],
                allow_everyone_if_no_acl_found=self.settings.allow_everyone_if_no_acl_found)

    # ------------------------------------------------------------------ listeners

    def listener(self, name):
        """The `ListenerSecurity` of listener `name` (contexts built now: a missing or bad
        key file raises ConfigError)."""
        config = self.settings.listener(name)
        ssl_context = mapper = None
        if config.uses_tls:
            ssl_context = server_context(config.tls)
            mapper = PrincipalMapper(config.tls.principal_mapping_rules, config.tls.prefix)
        return ListenerSecurity(config.protocol, ssl_context=ssl_context,
                                principal_mapper=mapper,
                                sasl_session=self._sasl_sessions(config)
                                if config.uses_sasl else None)

    def _sasl_sessions(self, config):
        """What makes one SASL session per connection of listener `config`."""
        plain_users = config.plain_users()
        mechanisms = config.sasl_mechanisms

        def make_server(which):
            if which == PLAIN:
                return PlainServer(plain_users.get)
            return ScramServer(which, self._scram_lookup(which), _nonce,
                               fake_salt_key=self._fake_salt_key)

        return lambda: SaslServerSession(mechanisms, make_server)

    def _scram_lookup(self, which):
        code = mechanism(which).code

        def lookup(user):
            record = self._image().scram.get((user, code))
            if record is None:
                return None
            return ScramCredential(bytes(record.salt), bytes(record.stored_key),
                                   bytes(record.server_key), record.iterations)
        return lookup

    # ------------------------------------------------------------------ clients

    def client_options(self, listener, mechanism_name):
        """The `Connection` / `PeerPool` options to reach other nodes' listener `listener`
        (this node's own settings of that listener: its trust store, its key for client
        authentication, its SASL credentials for `mechanism_name`)."""
        config = self.settings.listener(listener)
        options = {}
        if config.uses_tls:
            options["ssl_context"] = client_context(config.tls)
        if config.uses_sasl:
            username, password = config.client_credentials(mechanism_name)

            def sasl():
                return client_exchange(mechanism_name, username, password, nonce=_nonce)
            options["sasl"] = sasl
        return options

    def protocol(self, listener):
        return self.settings.listener(listener).protocol

    # ------------------------------------------------------------------ authorization

    def refresh(self):
        """Re-index the ACLs when the image changed them (cheap otherwise)."""
        if self.authorizer is not None:
            self.authorizer.update(self._image())
