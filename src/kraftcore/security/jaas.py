"""The `sasl.jaas.config` value: JAAS login module entries in the one-line form Kafka reads
from a property, e.g.

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_admin="admin-secret";

Grammar: `<login module class> <control flag> (<key>=<value>)* ;`, repeated. The control
flag is `required`, `requisite`, `sufficient` or `optional` (any case). A value is quoted
(`"..."` or `'...'`, with backslash escapes `\\n`, `\\t`, `\\r`, `\\\\`, `\\"`, `\\'`; any other
escaped character stands for itself) or a bare word of letters, digits and `._-$`. `//` and
`/* */` comments are skipped. The `;` after each entry is required. Bad text raises
ValueError naming the character position.

Helpers read a PlainLoginModule's options: `plain_users` gives the `user_<name>` passwords a
PLAIN server checks against, `client_credentials` the `username` and `password` a client
sends.
"""

from typing import NamedTuple

__all__ = ["JaasEntry", "CONTROL_FLAGS", "PLAIN_LOGIN_MODULE", "SCRAM_LOGIN_MODULE",
           "parse_jaas_entries", "parse_jaas_config", "plain_users", "client_credentials"]

CONTROL_FLAGS = ("required", "requisite", "sufficient", "optional")
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"

_WORD = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-$")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}


class JaasEntry(NamedTuple):
    """One login module entry: its class, its control flag (lower case), its options."""

    login_module: str
    control_flag: str
    options: dict


class _Tokens:
    """Tokens of JAAS text: ("word", text), ("quoted", text), ("=", None), (";", None),
    each with the position where it starts; ("end", None) at the end."""

    def __init__(self, text):
        self.text = text
        self.pos = 0

    def error(self, message, pos=None):
        pos = self.pos if pos is None else pos
        return ValueError(f"invalid sasl.jaas.config at character {pos}: {message}")

    def _skip(self):
        text, n = self.text, len(self.text)
        while self.pos < n:
            if text[self.pos].isspace():
                self.pos += 1
            elif text.startswith("//", self.pos):
                end = text.find("\n", self.pos)
                self.pos = n if end < 0 else end + 1
            elif text.startswith("/*", self.pos):
                end = text.find("*/", self.pos + 2)
                if end < 0:
                    raise self.error("a /* comment is not closed")
                self.pos = end + 2
            else:
                return

    def next(self):
        self._skip()
        text, start = self.text, self.pos
        if start >= len(text):
            return "end", None, start
        char = text[start]
        if char in "=;":
            self.pos += 1
            return char, None, start
        if char in "\"'":
            return "quoted", self._quoted(char), start
        if char in _WORD:
            end = start
            while end < len(text) and text[end] in _WORD:
                end += 1
            self.pos = end
            return "word", text[start:end], start
        raise self.error(f"unexpected character {char!r}")

    def _quoted(self, quote):
        text, i = self.text, self.pos + 1
        out = []
        while i < len(text):
            char = text[i]
            if char == quote:
                self.pos = i + 1
                return "".join(out)
            if char == "\\":
                if i + 1 >= len(text):
                    break
                nxt = text[i + 1]
                out.append(_ESCAPES.get(nxt, nxt))
                i += 2
                continue
            out.append(char)
            i += 1
        raise self.error("a quoted value is not closed", self.pos)


def _describe(kind, value):
    if kind == "end":
        return "the end of the text"
    if kind in "=;":
        return repr(kind)
    return repr(value)


def parse_jaas_entries(text):
    """Every `JaasEntry` of `text`, in order."""
    if not isinstance(text, str):
        raise ValueError(f"sasl.jaas.config must be text, not {type(text).__name__}")
    tokens = _Tokens(text)
    entries = []
    while True:
        kind, value, pos = tokens.next()
        if kind == "end":
            break
        if kind != "word":
            raise tokens.error(f"expected a login module class, found {_describe(kind, value)}",
                               pos)
        module = value
        kind, flag, pos = tokens.next()
        if kind != "word" or flag.lower() not in CONTROL_FLAGS:
            raise tokens.error(f"expected a control flag ({', '.join(CONTROL_FLAGS)}) after "
                               f"{module}, found {_describe(kind, flag)}", pos)
        options = {}
        while True:
            kind, key, pos = tokens.next()
            if kind == ";":
                break
            if kind == "end":
                raise tokens.error(f"the entry of {module} does not end with ';'", pos)
            if kind != "word":
                raise tokens.error(f"expected an option name or ';', found "
                                   f"{_describe(kind, key)}", pos)
            kind, _, pos = tokens.next()
            if kind != "=":
                raise tokens.error(f"expected '=' after option {key}, found "
                                   f"{_describe(kind, _)}", pos)
            kind, option, pos = tokens.next()
            if kind not in ("word", "quoted"):
                raise tokens.error(f"option {key} has no value", pos)
            if key in options:
                raise tokens.error(f"option {key} is given twice", pos)
            options[key] = option
        entries.append(JaasEntry(module, flag.lower(), options))
    return entries


def parse_jaas_config(text):
    """The one `JaasEntry` of a `sasl.jaas.config` value (Kafka allows exactly one login
    module there)."""
    entries = parse_jaas_entries(text)
    if len(entries) != 1:
        raise ValueError(f"sasl.jaas.config must hold exactly one login module entry, not "
                         f"{len(entries)}")
    return entries[0]


def _options(entry_or_options):
    if isinstance(entry_or_options, JaasEntry):
        return entry_or_options.options
    if not isinstance(entry_or_options, dict):
        raise ValueError("expected a JaasEntry or its options dict")
    return entry_or_options


def plain_users(options):
    """{user: password} from the `user_<name>="<password>"` options."""
    return {key[5:]: value for key, value in _options(options).items()
            if key.startswith("user_") and len(key) > 5}


def client_credentials(options):
    """(username, password) a client logs in with; ValueError if either is missing."""
    options = _options(options)
    missing = [k for k in ("username", "password") if not options.get(k)]
    if missing:
        raise ValueError(f"sasl.jaas.config has no {' and no '.join(missing)} option")
    return options["username"], options["password"]
