"""The strings tests/fixtures/k8s_quantities.json asks Kubernetes about (see regen.sh).

Hand-picked cases (Kubernetes' own test tables, the quantities pods write, the strings
of issue 23's attacks) and a seeded random sample over the grammar's alphabet, so the
table covers the corners of ``parseQuantityString`` nobody thought to write down.
"""

from __future__ import annotations

import json
import random
import re
import sys

HAND = [
    # what pods and nodes write
    "0",
    "1",
    "2",
    "8",
    "64",
    "20Gi",
    "24Gi",
    "81559Mi",
    "1500Mi",
    "16G",
    "500m",
    "250m",
    "1.5",
    "1.5Gi",
    "0.5Gi",
    "1e3",
    "1E3",
    "1e-3",
    "100Ki",
    "1Ti",
    "2Pi",
    "1Ei",
    "8Ei",
    "1k",
    "1M",
    "1T",
    "1P",
    "1E",
    "1n",
    "1u",
    "110",
    "256Gi",
    "64",
    # Kubernetes' quantity_test.go invalid table, and whitespace
    "1.1.M",
    "1+1.0M",
    "0.1mi",
    "0.1am",
    "aoeu",
    ".5i",
    "1i",
    "-3.01i",
    "-3.01e-",
    " 1",
    "1 ",
    # corners of parseQuantityString
    "",
    "+",
    "-",
    ".",
    "+.",
    "-.",
    "00",
    "000Gi",
    ".5",
    "5.",
    "5.Gi",
    "-0",
    "+0",
    "0.0",
    "1e",
    "1E",
    "1e+3",
    "1e-3",
    "1e+",
    "1K",
    "1Mi1",
    "1.e5",
    ".e5",
    "e5",
    "Gi",
    "1GiB",
    "1ki",
    "1KI",
    "1 Gi",
    "1_000Gi",
    "0x10",
    "1,5",
    "1e3.5",
    "--1",
    "+-1",
    "1e--3",
    # sizes near int64
    "9223372036854775806",
    "9223372036854775807",
    "9223372036854775808",
    "8Ei",
    "7Ei",
    "7.99Ei",
    "9223372036854775807m",
    "922337203685477580.7k",
    "1e18",
    "1e19",
    "9.2e18",
    "123456789012345678",
    "1234567890123456789",
    "12345678901234567890",
    # tiny values (Kubernetes rounds them up to one nano-unit)
    "1e-9",
    "1e-10",
    "0.0000000001",
    "0.000000001",
    "1.5e-10",
    "-1e-10",
    "1n",
    "0.5n",
    # issue 23's attacks (huge exponents, unicode digits, underscores)
    "1e999999",
    "1e999999Gi",
    "-1e999999",
    "1e-999999",
    "٣Gi",
    "２０Gi",  # noqa: RUF001 (fullwidth digits on purpose)
    "1e300",
    "1e-300",
]
# Kubernetes itself takes minutes over 10^(10^8) (it keeps the value whole), so the table
# stops at six-digit exponents; headroom refuses longer ones on sight (tests say so).
_HUGE_EXPONENT = re.compile(r"[eE][+-]?0*[0-9]{7,}")
ALPHABET = "0123456789.+-eEinumkKMGTP"


def sample(n: int, seed: int = 1) -> list[str]:
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        k = rnd.randint(1, 10)
        out.append("".join(rnd.choice(ALPHABET) for _ in range(k)))
    return out


def shaped(n: int, seed: int = 2) -> list[str]:
    """Strings built from the grammar's parts (sign, digits, fraction, suffix), most of
    them valid, so the accepted side of the table is as wide as the refused one."""
    rnd = random.Random(seed)
    suffixes = [
        "",
        "Ki",
        "Mi",
        "Gi",
        "Ti",
        "Pi",
        "Ei",
        "n",
        "u",
        "m",
        "k",
        "M",
        "G",
        "T",
        "P",
        "E",
        "e3",
        "e-3",
        "E+2",
        "e0",
        "e-12",
        "e19",
        "e-9",
        "e18",
    ]

    def digits() -> str:
        return "".join(rnd.choice("0123456789") for _ in range(rnd.randint(0, 12)))

    out = []
    for _ in range(n):
        sign = rnd.choice(["", "", "", "+", "-"])
        frac = rnd.choice(["", "", "." + digits(), "."])
        out.append(sign + digits() + frac + rnd.choice(suffixes))
    return out


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
    seen = [s for s in dict.fromkeys(HAND + sample(n) + shaped(n)) if not _HUGE_EXPONENT.search(s)]
    json.dump(seen, sys.stdout)
