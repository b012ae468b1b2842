"""An independent recogniser for llama.cpp's GBNF notation, for the grammar tests: a small
GBNF parser and an Earley recogniser over Unicode code points (with Aycock-Horspool handling
of nullable rules). Shares nothing with tpd's C grammar module. Answers:
  Grammar(text).matches(s)          the whole string is a sentence of the grammar
  Grammar(text).viable(b)           the bytes are a prefix of some sentence's UTF-8 encoding
  Grammar(text).state(b) / .step()  the same, incrementally (for masks over a vocabulary)
"""
import re

_TOKEN = re.compile(r"""
    (?P<ws>[ \t\r\n]+|\#[^\n]*) |
    (?P<def>::=) |
    (?P<name>[A-Za-z0-9_-]+) |
    (?P<lit>"(?:\\.|[^"\\])*") |
    (?P<cls>\[(?:\\.|[^\]\\])+\]|\[\]) |
    (?P<rep>\{\s*\d+\s*(?:,\s*\d*\s*)?\}) |
    (?P<op>[()|*+?.])
""", re.X | re.S)

MAXCP = 0x10FFFF


def _unescape(s, i):
    """(code point, next index) of the character at s[i] inside a literal or class."""
    c = s[i]
    if c != "\\":
        return ord(c), i + 1
    e = s[i + 1]
    if e in "xuU":
        n = {"x": 2, "u": 4, "U": 8}[e]
        return int(s[i + 2:i + 2 + n], 16), i + 2 + n
    return {"n": 10, "r": 13, "t": 9, "0": 0}.get(e, ord(e)), i + 2


def _class(body):
    neg = body.startswith("^")
    if neg:
        body = body[1:]
    rs, i = [], 0
    while i < len(body):
        lo, i = _unescape(body, i)
        hi = lo
        if i + 1 < len(body) and body[i] == "-":
            hi, i = _unescape(body, i + 1)
        rs.append((lo, hi))
    if neg:
        rs.sort()
        out, nxt = [], 0
        for lo, hi in rs:
            if lo > nxt:
                out.append((nxt, lo - 1))
            nxt = max(nxt, hi + 1)
        if nxt <= MAXCP:
            out.append((nxt, MAXCP))
        rs = out
    return tuple(rs)


class Grammar:
    def __init__(self, text, root="root"):
        self.rules = {}  # name -> list of tuples of symbols: ("t", ranges) or ("n", name)
        self._n = 0
        toks, pos = [], 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if not m:
                raise ValueError(f"GBNF: unrecognised text at {pos}: {text[pos:pos + 20]!r}")
            if m.lastgroup != "ws":
                toks.append((m.lastgroup, m.group()))
            pos = m.end()
        self._t, self._i = toks, 0
        while self._i < len(toks):
            kind, name = toks[self._i]
            if kind != "name" or self._i + 1 >= len(toks) or toks[self._i + 1][0] != "def":
                raise ValueError(f"GBNF: expected a rule at token {self._i}: {name!r}")
            self._i += 2
            self.rules.setdefault(name, []).extend(self._alts())
        self.root = root
        for alts in list(self.rules.values()):
            for a in alts:
                for s in a:
                    if s[0] == "n" and s[1] not in self.rules:
                        raise ValueError(f"GBNF: undefined rule {s[1]}")
        self._nullable()

    # -- parsing
    def _fresh(self, alts):
        self._n += 1
        name = f" g{self._n}"
        self.rules[name] = alts
        return ("n", name)

    def _at_rule(self):
        t = self._t
        return self._i + 1 < len(t) and t[self._i][0] == "name" and t[self._i + 1][0] == "def"

    def _alts(self):
        alts = [self._seq()]
        while self._i < len(self._t) and self._t[self._i] == ("op", "|"):
            self._i += 1
            alts.append(self._seq())
        return alts

    def _seq(self):
        seq = []
        while self._i < len(self._t) and not self._at_rule():
            kind, v = self._t[self._i]
            if kind == "op" and v in "|)":
                break
            self._i += 1
            if kind == "lit":
                body, cps, i = v[1:-1], [], 0
                while i < len(body):
                    cp, i = _unescape(body, i)
                    cps.append(("t", ((cp, cp),)))
                atom = self._fresh([tuple(cps)])
            elif kind == "cls":
                atom = ("t", _class(v[1:-1]))
            elif kind == "name":
                atom = ("n", v)
            elif v == ".":
                atom = ("t", ((0, MAXCP),))
            elif v == "(":
                atom = self._fresh(self._alts())
                assert self._t[self._i] == ("op", ")"), "GBNF: missing )"
                self._i += 1
            else:
                raise ValueError(f"GBNF: unexpected {v!r}")
            while self._i < len(self._t) and (self._t[self._i][0] == "rep" or self._t[self._i] in
                                               (("op", "*"), ("op", "+"), ("op", "?"))):
                k, r = self._t[self._i]
                self._i += 1
                if r == "*":
                    lo, hi = 0, None
                elif r == "+":
                    lo, hi = 1, None
                elif r == "?":
                    lo, hi = 0, 1
                else:
                    parts = r[1:-1].split(",")
                    lo = int(parts[0])
                    hi = lo if len(parts) == 1 else (int(parts[1]) if parts[1].strip() else None)
                atom = self._repeat(atom, lo, hi)
            seq.append(atom)
        return tuple(seq)

    def _repeat(self, atom, lo, hi):
        items = [atom] * lo
        if hi is None:
            star = ("n", None)
            star = self._fresh([])
            self.rules[star[1]].extend([(atom, star), ()])
            items.append(star)
        else:
            tail = None
            for _ in range(hi - lo):
                tail = self._fresh([(atom,) + ((tail,) if tail else ()), ()])
            if tail:
                items.append(tail)
        return self._fresh([tuple(items)])

    def _nullable(self):
        self.null = set()
        changed = True
        while changed:
            changed = False
            for n, alts in self.rules.items():
                if n not in self.null and any(all(s[0] == "n" and s[1] in self.null for s in a) for a in alts):
                    self.null.add(n)
                    changed = True

    # -- Earley
    def _close(self, sets, k, items):
        """Completes and predicts in set k (a set of (rule, alt, dot, origin)) to a fixpoint."""
        todo = list(items)
        cur = items
        while todo:
            it = todo.pop()
            n, a, d, o = it
            alt = self.rules[n][a]
            if d == len(alt):  # complete
                src = sets[o] if o < k else cur
                for it2 in list(src):
                    n2, a2, d2, o2 = it2
                    alt2 = self.rules[n2][a2]
                    if d2 < len(alt2) and alt2[d2] == ("n", n):
                        new = (n2, a2, d2 + 1, o2)
                        if new not in cur:
                            cur.add(new)
                            todo.append(new)
                continue
            s = alt[d]
            if s[0] == "n":
                for ai in range(len(self.rules[s[1]])):
                    new = (s[1], ai, 0, k)
                    if new not in cur:
                        cur.add(new)
                        todo.append(new)
                if s[1] in self.null:
                    new = (n, a, d + 1, o)
                    if new not in cur:
                        cur.add(new)
                        todo.append(new)
        return cur

    def start(self):
        s0 = {(self.root, i, 0, 0) for i in range(len(self.rules[self.root]))}
        return [self._close([], 0, s0)]

    def step(self, sets, cp):
        """The sets after one more code point, or None when it cannot follow."""
        k = len(sets)
        nxt = set()
        for n, a, d, o in sets[-1]:
            alt = self.rules[n][a]
            if d < len(alt) and alt[d][0] == "t" and any(lo <= cp <= hi for lo, hi in alt[d][1]):
                nxt.add((n, a, d + 1, o))
        if not nxt:
            return None
        return sets + [self._close(sets, k, nxt)]

    def complete(self, sets):
        return any(n == self.root and o == 0 and d == len(self.rules[n][a]) for n, a, d, o in sets[-1])

    def expected(self, sets):
        out = []
        for n, a, d, o in sets[-1]:
            alt = self.rules[n][a]
            if d < len(alt) and alt[d][0] == "t":
                out.extend(alt[d][1])
        return out

    def matches(self, s):
        sets = self.start()
        for ch in s:
            sets = self.step(sets, ord(ch))
            if sets is None:
                return False
        return self.complete(sets)

    def state(self, b):
        """(sets, tail): the sets after the complete code points of b and the incomplete
        UTF-8 tail, or None when b is not a viable prefix."""
        return self.extend((self.start(), b""), b)

    def extend(self, st, b):
        sets, tail = st
        buf = tail + b
        i = 0
        while i < len(buf):
            n = _seq_len(buf[i])
            if n == 0:
                return None
            if i + n > len(buf):
                break
            try:
                cp = ord(buf[i:i + n].decode("utf-8"))
            except UnicodeDecodeError:
                return None
            sets = self.step(sets, cp)
            if sets is None:
                return None
            i += n
        rest = buf[i:]
        if rest:
            rng = _tail_range(rest)
            if rng is None or not any(lo <= rng[1] and rng[0] <= hi for lo, hi in self.expected(sets)):
                return None
        return sets, rest

    def viable(self, b):
        return self.state(b) is not None


def _seq_len(b0):
    if b0 < 0x80:
        return 1
    if 0xC2 <= b0 <= 0xDF:
        return 2
    if 0xE0 <= b0 <= 0xEF:
        return 3
    if 0xF0 <= b0 <= 0xF4:
        return 4
    return 0


def _tail_range(t):
    """Code points whose UTF-8 encoding starts with the incomplete sequence t, as (lo, hi)."""
    n = _seq_len(t[0])
    second = {0xE0: (0xA0, 0xBF), 0xED: (0x80, 0x9F), 0xF0: (0x90, 0xBF), 0xF4: (0x80, 0x8F)}.get(t[0], (0x80, 0xBF))
    for j, c in enumerate(t[1:], 1):
        lo, hi = second if j == 1 else (0x80, 0xBF)
        if not lo <= c <= hi:
            return None
    lo_b, hi_b = bytearray(t), bytearray(t)
    for j in range(len(t), n):
        lo, hi = second if j == 1 else (0x80, 0xBF)
        lo_b.append(lo)
        hi_b.append(hi)
    return ord(bytes(lo_b).decode("utf-8")), ord(bytes(hi_b).decode("utf-8"))
