"""The bill page (``GET /ui``) opened in a real headless Chromium against a real
``headroom serve`` with an audit token: the namespaces' costs and GiB-hours it shows
are ``/v1/chargeback``'s for the same window, it lists the allocations with their GPUs
and the discrepancies, a wrong token shows the audit API's refusal, and the page is
served under a strict Content-Security-Policy with no file from anywhere else."""

from __future__ import annotations

import html.parser
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import msgspec
import pytest

from tests.serveproc import TOKEN, ServeProc
from tests.support import gpu_pod

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
AUDIT = "audit-secret"


class Dom(html.parser.HTMLParser):
    """The rendered DOM: every element's attributes, and the text of table cells."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[dict[str, str | None]] = []
        self.rows: dict[str, list[str]] = {}  # data-key / data-id of a row -> its cells
        self._row: str | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.elements.append({"tag": tag, **a})
        if tag == "tr":
            key = a.get("data-key") or a.get("data-id") or a.get("data-node") or a.get("data-kind")
            self._row = key
            if key is not None:
                self.rows.setdefault(key, [])
        elif tag == "td" and self._row is not None:
            self._cell = []

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None and self._row is not None:
            self.rows[self._row].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr":
            self._row = None

    def by_id(self, id_: str) -> dict[str, str | None]:
        (el,) = [e for e in self.elements if e.get("id") == id_]
        return el


def chromium(url: str, *extra: str) -> str:
    """The page after its script ran (``--dump-dom``), or what ``extra`` asks for."""
    assert CHROMIUM, "chromium is installed by .ci/setup (Debian's chromium package)"
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    cmd += ["--virtual-time-budget=10000", *(extra or ("--dump-dom",)), url]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[ServeProc]:
    token = tmp_path / "audit-token"
    token.write_text(AUDIT)
    proc = ServeProc(tmp_path, str(tmp_path / "h.db"), ["--audit-token-file", str(token)])
    proc.start()
    yield proc
    proc.stop()


def bind(c: httpx.Client, serve: ServeProc, ns: str, name: str, mem: str, node: str) -> None:
    pod = gpu_pod(name, memory=mem, namespace=ns)
    args = {"Pod": pod, "Nodes": None, "NodeNames": [node]}
    c.post(serve.url + "/filter", content=msgspec.json.encode(args)).raise_for_status()
    uid = pod["metadata"]["uid"]
    body = {"PodName": name, "PodNamespace": ns, "PodUID": uid, "Node": node}
    assert c.post(serve.url + "/bind", json=body).json() == {"Error": ""}


def test_the_page_shows_the_bill_the_api_computes(serve: ServeProc, tmp_path: Path) -> None:
    start = time.time() - 1
    serve.report("gpu-1", "2xA10G:24Gi")
    serve.report("gpu-2", "1xA10G:24Gi")
    with httpx.Client(timeout=10) as c:
        for ns, name, mem, node in (
            ("training", "t1", "16Gi", "gpu-1"),
            ("training", "t2", "8Gi", "gpu-1"),
            ("inference", "i1", "4Gi", "gpu-2"),
        ):
            bind(c, serve, ns, name, mem, node)
        driver = serve.drivers["gpu-2"]
        driver.start_process("rogue-pod", driver.gpu_uuids[0], 2048)  # a leak
        serve.report("gpu-2", "1xA10G:24Gi")
        time.sleep(1.5)
        for uid in {a["pod_uid"] for a in allocations(c, serve)}:  # ended: the bill is fixed
            r = c.post(
                f"{serve.url}/v1/pods/{uid}/release", headers={"Authorization": f"Bearer {TOKEN}"}
            )
            r.raise_for_status()
        end = time.time()
        window = {"from": str(start), "to": str(end)}
        auth = {"Authorization": f"Bearer {AUDIT}"}
        bill = c.get(serve.url + "/v1/chargeback", params=window, headers=auth).json()
        rows = allocations(c, serve)
        page = c.get(serve.url + "/ui")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert "http" not in page.text.replace("http-equiv", "")  # nothing from elsewhere

    url = f"{serve.url}/ui#token={AUDIT}&from={start}&to={end}"
    dom = Dom()
    dom.feed(chromium(url))
    assert dom.by_id("status").get("data-ready") == "1", dom.by_id("error")
    assert {g["key"] for g in bill["groups"]} == {"training", "inference"}
    for g in bill["groups"]:  # the page's numbers are the API's, group by group
        cells = dom.rows[g["key"]]
        assert cells[2] == g["gib_hours"] and cells[3] == g["cost"], (cells, g)
    assert dom.by_id("totals").get("data-charged") == bill["total_charged"]
    for n in bill["nodes"]:
        assert dom.rows[n["node"]][4:7] == [n["cost"], n["charged"], n["idle"]]
    for a in rows:  # every allocation with its GPU
        assert dom.rows[str(a["id"])][3] == a["gpu_uuid"]
    assert "leak" in dom.rows

    shot = tmp_path / "ui.png"
    chromium(url, f"--screenshot={shot}", "--window-size=1280,900")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    refused = Dom()
    refused.feed(chromium(f"{serve.url}/ui#token=wrong"))
    error = refused.by_id("error")
    assert "hidden" not in error and refused.by_id("auth").get("hidden") is None


def allocations(c: httpx.Client, serve: ServeProc) -> list[dict]:
    r = c.get(
        serve.url + "/v1/allocations",
        params={"limit": "1000"},
        headers={"Authorization": f"Bearer {AUDIT}"},
    )
    r.raise_for_status()
    items: list[dict] = r.json()["items"]
    return items
