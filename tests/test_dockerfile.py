"""The Dockerfile, replayed without a Docker engine.

There is no container engine on the build machines, so this test reads the Dockerfile,
and replays its COPY and RUN steps for real in a temporary directory that stands in for
the image's root: the build context filtered by .dockerignore, the `pip wheel` of the
build stage, the venv and `pip install --no-index` of the final stage, with the same
commands (absolute paths mapped under the temporary root, `python` being a fresh virtual
environment of this interpreter). Then it runs the installed ENTRYPOINT with the CMD and
--help, `serve --help`, `agent --help`, and imports every installed module, so a
dependency missing from pyproject.toml, a file the COPY steps leave out, or a broken
entry point fails here as it would in the image.

The pip cache of the `--mount=type=cache` step lives in
${HEADROOM_TOOLS_CACHE:-~/.cache/headroom-tools}/pip, so reruns download nothing.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
CACHE = Path(os.environ.get("HEADROOM_TOOLS_CACHE", Path.home() / ".cache" / "headroom-tools"))

# Network settings of the host's pip are kept; anything else PIP_* (find-links, no-index,
# ...) or PYTHON* would make the replay differ from a clean image.
_KEEP_ENV = {
    "PIP_CERT",
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "PIP_TRUSTED_HOST",
    "PIP_DEFAULT_TIMEOUT",
    "PIP_PROXY",
}


# ------------------------------------------------------------------ parsing


@dataclass
class Step:
    op: str
    args: str
    flags: dict[str, str] = field(default_factory=dict)


@dataclass
class Stage:
    image: str
    name: str | None
    steps: list[Step] = field(default_factory=list)


def parse(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Global ARGs and stages; continuation lines joined, comment lines dropped."""
    lines: list[str] = []
    buf = ""
    for raw in text.splitlines():
        if raw.lstrip().startswith("#"):
            continue  # comments (also inside continuations) and the syntax directive
        if raw.rstrip().endswith("\\"):
            buf += raw.rstrip()[:-1]  # Docker drops the backslash and the newline
            continue
        buf += raw
        if buf.strip():
            lines.append(buf.strip())
        buf = ""
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in lines:
        op, _, rest = line.partition(" ")
        op = op.upper()
        rest = rest.strip()
        flags: dict[str, str] = {}
        while rest.startswith("--"):
            flag, _, rest = rest.partition(" ")
            key, _, value = flag[2:].partition("=")
            flags[key if key != "mount" else f"mount{len(flags)}"] = value
            rest = rest.lstrip()
        if op == "FROM":
            words = rest.split()
            image = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], words[0])
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(image, name))
        elif op == "ARG" and not stages:
            key, _, value = rest.partition("=")
            args[key] = value
        else:
            stages[-1].steps.append(Step(op, rest, flags))
    return args, stages


def _pattern(pat: str) -> re.Pattern[str]:
    out = ""
    i = 0
    while i < len(pat):
        if pat.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pat.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pat[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pat[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pat[i]), i + 1
    return re.compile(out + r"\Z")


def dockerignore() -> list[tuple[bool, re.Pattern[str]]]:
    rules = []
    for line in DOCKERIGNORE.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keep = line.startswith("!")
        rules.append((keep, _pattern(line.lstrip("!").strip("/"))))
    return rules


def ignored(rel: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Docker's rule: a pattern matches a path or any of its parents; the last match wins."""
    parts = rel.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    verdict = False
    for keep, rx in rules:
        if any(rx.match(c) for c in candidates):
            verdict = not keep
    return verdict


# ------------------------------------------------------------------ replay


class Replay:
    def __init__(self, tmp: Path) -> None:
        self.root = tmp / "image"
        self.root.mkdir()
        base = tmp / "base-python"  # the base image's interpreter, with its own pip
        subprocess.run([sys._base_executable, "-m", "venv", str(base)], check=True)  # type: ignore[attr-defined]
        self.bin = base / "bin"
        self.rules = dockerignore()
        self.log: list[str] = []

    def path(self, p: str) -> Path:
        assert p.startswith("/"), p
        return self.root / p.lstrip("/")

    def map_abs(self, text: str) -> str:
        return re.sub(
            r"(?<![\w.$-])(/[A-Za-z0-9_.][^\s:;&|'\"]*)", lambda m: str(self.path(m.group(1))), text
        )

    def run_stage(self, stage: Stage) -> dict[str, str]:
        cwd = self.root
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("PIP_", "PYTHON", "VIRTUAL_ENV")) or k in _KEEP_ENV
        }
        env["PATH"] = f"{self.bin}:{env.get('PATH', '/usr/bin:/bin')}"
        env["HOME"] = str(self.path("/root"))  # builds run as root: pip's cache is /root/.cache
        for step in stage.steps:
            if step.op == "WORKDIR":
                cwd = self.path(step.args) if step.args.startswith("/") else cwd / step.args
                cwd.mkdir(parents=True, exist_ok=True)
            elif step.op == "ENV":
                for word in shlex.split(step.args):
                    key, _, value = word.partition("=")
                    value = self.map_abs(value)  # before $PATH brings in host paths
                    env[key] = value.replace("${PATH}", env["PATH"]).replace("$PATH", env["PATH"])
            elif step.op == "COPY":
                self.copy(step, cwd)
            elif step.op == "RUN":
                self.run(step, cwd, env)
            elif step.op == "ADD":
                raise AssertionError("ADD is not replayed; use COPY")
        return env

    def copy(self, step: Step, cwd: Path) -> None:
        assert "from" not in step.flags, "COPY --from is not replayed"
        *sources, dest = shlex.split(step.args)
        target = self.path(dest) if dest.startswith("/") else cwd / dest
        for src in sources:
            matches = sorted(ROOT.glob(src.rstrip("/"))) or [ROOT / src]
            for m in matches:
                rel = m.relative_to(ROOT).as_posix()
                assert m.exists() and not ignored(rel, self.rules), (
                    f"COPY {src}: not in the build context (missing or .dockerignore'd)"
                )
                if m.is_dir():
                    for f in sorted(m.rglob("*")):
                        frel = f.relative_to(ROOT).as_posix()
                        if f.is_file() and not ignored(frel, self.rules):
                            out = target / f.relative_to(m)
                            out.parent.mkdir(parents=True, exist_ok=True)
                            shutil.copy2(f, out)
                else:
                    into_dir = dest.endswith("/") or len(sources) > 1
                    out = target / m.name if into_dir else target
                    out.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(m, out)
        self.log.append(f"COPY {step.args}")

    def run(self, step: Step, cwd: Path, env: dict[str, str]) -> None:
        for key, spec in step.flags.items():
            assert key.startswith("mount"), f"RUN --{key} is not replayed"
            opts = dict(kv.split("=", 1) for kv in spec.split(","))
            if opts["type"] == "cache":
                mount = self.path(opts["target"])
                mount.parent.mkdir(parents=True, exist_ok=True)
                (CACHE / "pip").mkdir(parents=True, exist_ok=True)
                if not mount.exists():
                    mount.symlink_to(CACHE / "pip")
            elif opts["type"] == "bind":
                # from=<stage>: the stages share this root, so source and target coincide
                assert opts["source"] == opts["target"], opts
                assert self.path(opts["source"]).exists(), f"nothing at {opts['source']}"
            else:
                raise AssertionError(f"mount type {opts['type']} is not replayed")
        command = self.map_abs(step.args)
        proc = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", command],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert proc.returncode == 0, (
            f"RUN {step.args}\n(replayed as: {command})\n{proc.stdout[-3000:]}\n"
            f"{proc.stderr[-6000:]}"
        )
        self.log.append(f"RUN {step.args}")


def instruction(stage: Stage, op: str) -> Step:
    (step,) = [s for s in stage.steps if s.op == op]
    return step


# ------------------------------------------------------------------ the test


def test_dockerfile_installs_a_working_headroom(tmp_path: Path) -> None:
    args, stages = parse(DOCKERFILE.read_text())
    build, final = stages[0], stages[-1]

    # Static rules first (cheap): pinned base, wheels built apart, a lean non-root final stage.
    assert all(re.search(r"@sha256:[0-9a-f]{64}$", s.image) for s in stages), "pin the base"
    assert "python:3.11-slim-bookworm@" in args["PYTHON_IMAGE"]
    # the scoring kernel is C (extender/scoring/kernel.c): the wheel is built where gcc is
    assert build.image == args["BUILD_IMAGE"] and "python:3.11-bookworm@" in build.image
    assert stages[-1].image == args["PYTHON_IMAGE"]
    assert len(stages) == 2 and build.name == "build"
    assert instruction(final, "USER").args == "65532:65532"
    assert json.loads(instruction(final, "ENTRYPOINT").args) == ["headroom"]
    cmd = json.loads(instruction(final, "CMD").args)
    assert cmd == ["serve", "--host", "0.0.0.0"]
    assert not [s for s in final.steps if s.op in ("COPY", "ADD")], "final stage copies no source"
    final_runs = " ".join(s.args for s in final.steps if s.op == "RUN")
    for tool in ("apt-get", "gcc", "build-essential", "git "):
        assert tool not in final_runs, f"build tool {tool!r} in the final stage"
    assert "--no-index" in final_runs, "the final stage installs from the built wheels only"
    assert any(s.op == "LABEL" for s in final.steps)

    # Replay every COPY and RUN of both stages.
    replay = Replay(tmp_path)
    replay.run_stage(build)
    wheels = sorted(p.name for p in replay.path("/wheels").glob("*.whl"))
    ours = [w for w in wheels if w.startswith("headroom-")]
    assert ours and "-cp311-" in ours[0], wheels  # a platform wheel: the kernel compiled
    with zipfile.ZipFile(replay.path("/wheels") / ours[0]) as whl:
        names = whl.namelist()
    assert any(n.startswith("extender/scoring/kernel.") and n.endswith(".so") for n in names)
    env = replay.run_stage(final)
    assert len([x for x in replay.log if x.startswith("RUN")]) == 2, replay.log

    # ENTRYPOINT resolved on the final stage's PATH, as the container runtime would.
    entry = shutil.which(json.loads(instruction(final, "ENTRYPOINT").args)[0], path=env["PATH"])
    assert entry and Path(entry).is_relative_to(replay.root), (entry, env["PATH"])
    venv = Path(entry).parent.parent
    assert not (venv / "bin" / "pip").exists(), "no pip inside the runtime venv"

    def headroom(*argv: str) -> str:
        proc = subprocess.run(
            [entry, *argv],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
            check=False,
        )
        assert proc.returncode == 0, f"headroom {' '.join(argv)}:\n{proc.stderr[-4000:]}"
        return proc.stdout

    assert "serve" in headroom("--help") and "agent" in headroom("--help")
    serve = headroom(*cmd, "--help")  # the image's default command parses
    for flag in ("--host", "--port", "--db", "--policy", "--agent-token-file"):
        assert flag in serve, flag
    agent = headroom("agent", "--help")
    for flag in ("--driver", "--node", "--extender", "--token-file", "--metrics-port"):
        assert flag in agent, flag

    # Every installed module imports: catches a dependency missing from pyproject.toml
    # that --help alone would not reach (FastAPI, uvicorn, psycopg, pynvml, ...).
    probe = (
        "import importlib, pkgutil, sys\n"
        "import extender, drivers\n"
        "bad = []\n"
        "for pkg in (extender, drivers):\n"
        "    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "        if m.name.endswith('__main__'):\n"
        "            continue\n"
        "        try:\n"
        "            importlib.import_module(m.name)\n"
        "        except Exception as e:\n"
        "            bad.append(f'{m.name}: {type(e).__name__}: {e}')\n"
        "print('\\n'.join(bad)); sys.exit(1 if bad else 0)\n"
    )
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-c", probe],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, (
        f"modules that do not import in the image:\n{proc.stdout}{proc.stderr}"
    )
