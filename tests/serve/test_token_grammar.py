"""The token file's one grammar (issue #35 item 7): a seeded fuzz over generated lines, valid and mutated.

Each line is built knowing what it is: a valid line from the grammar with the entry it must give, or a valid
line broken by one named mutation (fields out of order, a trailing comment, an unknown scope, a second name, a
character no token or name may hold, ...). Every valid line gives exactly its entry; every mutated line, alone
or among valid lines, refuses the whole file naming its line (so it grants no scope, at start or after an edit)
and the message never quotes a token.
"""
from __future__ import annotations

import random
import string
from collections import Counter

import pytest

from fpr.errors import InputError
from fpr.serve.auth import SCOPES, AuthError, TokenStore, parse_tokens

SEED = 35
N_LINES = 5000  # 2,000 valid, 3,000 mutated
TOKEN_CHARS = string.ascii_letters + string.digits + "-._~+/"
NAME_FIRST = string.ascii_letters + string.digits
NAME_CHARS = NAME_FIRST + "._@-"
# printable ASCII no token may hold ('=' only as trailing padding), then controls and non-ASCII (no \n: it ends a line)
TOKEN_BAD = "!\"#$%&'()*,:;<>?@[\\]^`{|}" + "\x00\x01\x0b\x0c\x1b\x1c\x1e\x7f\x85\xa0\u2028\u00e9\u0430\ufffd"
NAME_BAD = "!\"#$%&'()*+,/:;<=>?[\\]^`{|}~" + "\x00\x0b\x0c\x1c\x1d\x7f\x85\u2028\u00e9\ufffd"
UNKNOWN_SCOPES = ["write", "ADMIN", "Admin", "root", "", "admin,read", "read|submit", "admins", "adm", "submit2",
                  "scope=admin", "admin=", "*"]


def _sep(rng: random.Random) -> str:
    return rng.choice([" ", "  ", "\t", " \t ", "   "])


def _token(rng: random.Random) -> str:
    return "".join(rng.choice(TOKEN_CHARS) for _ in range(rng.randint(12, 40))) + "=" * rng.randint(0, 2)


def _name(rng: random.Random) -> str:
    return rng.choice(NAME_FIRST) + "".join(rng.choice(NAME_CHARS) for _ in range(rng.randint(0, 20)))


def valid_line(rng: random.Random) -> tuple[str, tuple[str, str | None, str]]:
    """A line of the grammar and the (token, name or None, scope) it must give."""
    token = _token(rng)
    name = _name(rng) if rng.random() < 0.8 else None
    scope = rng.choice(SCOPES) if rng.random() < 0.7 else None
    fields = [token] + ([name] if name else []) + ([f"scope={scope}"] if scope else [])
    line = rng.choice(["", " ", "\t"]) + "".join(f + _sep(rng) for f in fields[:-1]) + fields[-1]
    line += rng.choice(["", " ", "\t", "\r", " \r"])
    return line, (token, name, scope or "submit")


def _insert(rng: random.Random, word: str, chars: str, *, inner: bool = False) -> str:
    lo = 1 if inner else 0
    at = rng.randint(lo, max(lo, len(word) - 1))
    return word[:at] + rng.choice(chars) + word[at:]


def mutated_line(rng: random.Random) -> tuple[str, str, str]:
    """A valid line broken by one mutation: (line, the mutation's name, its token)."""
    token, name, scope = _token(rng), _name(rng), rng.choice(SCOPES)
    s = _sep(rng)
    kind = rng.choice(["order", "order_no_name", "trailing_comment", "glued_comment", "unknown_scope",
                       "two_scopes", "two_names", "token_char", "token_inner_equals", "name_char", "name_first",
                       "name_too_long", "scope_spaced", "scope_case", "no_token", "comment_mid"])
    if kind == "order":  # the case of the issue: scope before the name
        line = f"{token}{s}scope={scope}{s}{name}"
    elif kind == "order_no_name":
        line = f"{token}{s}scope={scope}{s}scope={rng.choice(SCOPES)}{s}{name}"
    elif kind == "trailing_comment":  # the other case of the issue: "scope=read # admin" read as a name
        line = f"{token}{s}{name}{s}scope={scope}{s}#{rng.choice(['', ' '])}{rng.choice(SCOPES)}{_name(rng)}"
    elif kind == "glued_comment":
        line = f"{token}{s}{name}{s}scope={scope}#{rng.choice(SCOPES)}"
    elif kind == "unknown_scope":
        line = f"{token}{s}{name}{s}scope={rng.choice(UNKNOWN_SCOPES)}"
    elif kind == "two_scopes":
        line = f"{token}{s}{name}{s}scope={scope}{s}scope={rng.choice(SCOPES)}"
    elif kind == "two_names":
        line = f"{token}{s}{name}{s}{_name(rng)}" + (f"{s}scope={scope}" if rng.random() < 0.5 else "")
    elif kind == "token_char":
        line = f"{_insert(rng, token, TOKEN_BAD)}{s}{name}{s}scope={scope}"
    elif kind == "token_inner_equals":  # '=' only as trailing padding
        bare = token.rstrip("=")
        line = f"{bare[:len(bare) // 2]}={bare[len(bare) // 2:]}{s}{name}"
    elif kind == "name_char":
        line = f"{token}{s}{_insert(rng, name, NAME_BAD)}{s}scope={scope}"
    elif kind == "name_first":
        line = f"{token}{s}{rng.choice('._@-')}{name}{s}scope={scope}"
    elif kind == "name_too_long":
        line = f"{token}{s}{name[0] * 65}{s}scope={scope}"
    elif kind == "scope_spaced":
        line = f"{token}{s}{name}{s}scope{rng.choice([' = ', ' =', '= ', ':', ': '])}{scope}"
    elif kind == "scope_case":
        line = f"{token}{s}{rng.choice(['Scope', 'SCOPE', 'scopes', 'scop'])}={scope}"
    elif kind == "no_token":
        line = f"scope={scope}"
        token = ""
    else:  # comment_mid: a '#' after the token is not a comment
        line = f"{token}{s}#{s}{name}{s}scope={scope}"
    return line, kind, token


def _refused_at(text: str, line_no: int, token: str) -> str:
    with pytest.raises(InputError) as e:
        parse_tokens(text)
    message = e.value.one_line()
    assert message.startswith(f"token file line {line_no}: "), message
    assert not token or token.rstrip("=") not in message  # a token is never quoted back
    assert len(message.splitlines()) == 1
    return message


def test_fuzzed_token_lines_valid_give_their_entry_malformed_refuse_the_file(tmp_path):
    rng = random.Random(SEED)
    kinds: Counter = Counter()
    n_valid = n_mutated = 0
    for i in range(N_LINES):
        if i % 5 < 2:
            line, (token, name, scope) = valid_line(rng)
            [entry] = parse_tokens(line)
            assert (entry.token, entry.scope) == (token.encode(), scope), repr(line)
            assert entry.name == (name or entry.name) and (name or entry.name.startswith("token-"))
            n_valid += 1
            continue
        line, kind, token = mutated_line(rng)
        kinds[kind] += 1
        n_mutated += 1
        _refused_at(line, 1, token)
        # among valid lines and comments, at a random place: the file is refused naming that line
        before = [valid_line(rng)[0] for _ in range(rng.randint(0, 4))] + ["# a comment", ""]
        rng.shuffle(before)
        after = [valid_line(rng)[0] for _ in range(rng.randint(0, 3))]
        _refused_at("\n".join(before + [line] + after) + "\n", len(before) + 1, token)
    assert (n_valid, n_mutated) == (2000, 3000)
    assert len(kinds) == 16 and min(kinds.values()) >= 150, kinds  # every mutation was tried, many times


def test_a_malformed_file_grants_no_scope_at_start_or_after_an_edit(tmp_path):
    rng = random.Random(SEED + 1)
    good = tmp_path / "tokens"
    good.write_text("# ops\nok-token-0123456789 ops scope=admin\n")
    for i in range(200):
        line, kind, token = mutated_line(rng)
        f = tmp_path / f"bad-{i}"
        f.write_text(f"# team\nok-token-0123456789 ops scope=admin\n{line}\n", encoding="utf-8")
        with pytest.raises(InputError, match="^token file line 3: "):
            TokenStore(f)  # at start: refused, naming the line
        logged = []
        store = TokenStore(good, on_malformed=logged.append)
        assert store.check("Bearer ok-token-0123456789").scope == "admin"
        good.write_text(f.read_text() + "#" * (i + 1) + "\n")  # edited while serving (the size changes)
        for bearer in ("ok-token-0123456789", token):
            if bearer.strip():
                with pytest.raises(AuthError) as e:
                    store.check(f"Bearer {bearer}")
                assert e.value.status == 503 and "token file line 3" in e.value.message, kind
        assert len(logged) == 1 and logged[0].startswith("token file line 3: ")
        good.write_text("# ops\nok-token-0123456789 ops scope=admin\n")
        assert store.check("Bearer ok-token-0123456789").scope == "admin"  # fixed: served again


def test_the_grammar_decided():
    entries = parse_tokens("# team\n\n  \t\nabc alice\r\n  def  \nghi bob\tscope=read\njkl scope=admin\n"
                           "  # indented comment\nmno= carol scope=submit")
    assert [(e.token, e.name, e.scope) for e in entries] == [
        (b"abc", "alice", "submit"), (b"def", entries[1].name, "submit"), (b"ghi", "bob", "read"),
        (b"jkl", entries[3].name, "admin"), (b"mno=", "carol", "submit")]
    assert entries[1].name.startswith("token-") and len(entries[1].name) == 14 and "def" not in entries[1].name
    assert parse_tokens("") == [] and parse_tokens("# only\n\n") == []
    assert parse_tokens("a x\nb x scope=admin\n")[1].name == "x"  # two tokens of one name: a rotation
    for text, line_no, what in [
            ("a x\nb y\na z\n", 3, "the same token as line 1"),
            ("abc alice scope=read # admin\n", 1, "a comment must be a whole line starting with #"),
            ("abc scope=read alice\n", 1, "scope= must be the last field"),
            ("abc alice scope=write\n", 1, "unknown scope 'write'; use one of read, submit, admin"),
            ("abc alice smith\n", 1, "2 name fields; a name is one word"),
            ("# c\nabc al\u00efce\n", 2, "a control or non-ASCII character")]:
        assert _refused_at(text, line_no, "").startswith(f"token file line {line_no}: {what}")
