"""The openai SDK is imported with the packages of ``openai.types`` run on first use
(``flowkit.llm.sdk``): a chat request needs none of them. The rule on a package made for the
test (what runs when, once, under threads), then the SDK itself in a fresh process: a judged run
over real HTTP to the local test server loads none of the SDK's response types, and every name
of ``openai.types`` is still there when asked for, the SDK's public API (the fallback) included.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from flowkit.llm.sdk import deferring
from flowkit.testing.server import LocalServer
from tests.support import EXAMPLES

PACKAGE = {
    "__init__.py": "RAN.append('top')\nfrom .kinds.one import ONE\n",
    "kinds/__init__.py": "import time\nRAN.append('kinds')\ntime.sleep(0.05)\n"
    "from .one import ONE\nfrom .two import TWO\nBOTH = ONE + TWO\n",
    "kinds/one.py": "RAN.append('one')\nONE = 1\n",
    "kinds/two.py": "RAN.append('two')\nTWO = 2\n",
    "kinds/more/__init__.py": "RAN.append('more')\nfrom .three import THREE\n",
    "kinds/more/three.py": "RAN.append('three')\nTHREE = 3\n",
}
"""A package whose top imports one module of its ``kinds`` tree, as the SDK's client imports
one module of ``openai.types``; each module notes in ``RAN`` (a module beside the package)
that it ran."""


@pytest.fixture
def package(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[str, list[str]]]:
    """(the package's name, unique per test, and the list its modules note themselves in)."""
    name = "deferpkg_" + "".join(c if c.isalnum() else "_" for c in request.node.name)
    (tmp_path / f"{name}_ran.py").write_text("RAN: list[str] = []\n")
    for rel, text in PACKAGE.items():
        path = tmp_path / name / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"from {name}_ran import RAN\n{text}")
    sys.path.insert(0, str(tmp_path))
    try:
        yield name, importlib.import_module(f"{name}_ran").RAN
    finally:
        sys.path.remove(str(tmp_path))
        for module in [m for m in sys.modules if m.startswith(name)]:
            del sys.modules[module]


def _import_deferring_kinds(name: str) -> ModuleType:
    """The package ``name``, imported with its ``kinds`` tree deferred."""
    with deferring(f"{name}.kinds"):
        return importlib.import_module(name)


def test_a_deferred_package_runs_its_init_at_the_first_name_it_lacks(
    package: tuple[str, list[str]],
) -> None:
    name, ran = package
    top = _import_deferring_kinds(name)
    # The module the top needs ran; the package around it did not.
    assert ran == ["top", "one"]
    assert top.ONE == 1
    kinds = sys.modules[f"{name}.kinds"]
    assert kinds.__dict__.get("BOTH") is None
    assert kinds.BOTH == 3  # the first look-up runs the __init__
    assert ran == ["top", "one", "kinds", "two"]
    assert kinds.TWO == 2 and kinds.one.ONE == 1
    assert "__getattr__" not in kinds.__dict__  # from then on an ordinary package
    with pytest.raises(AttributeError) as err:
        _ = kinds.NOTHING
    assert str(err.value) == f"module '{name}.kinds' has no attribute 'NOTHING'"
    # A package of the tree first imported after the block is imported as always.
    more = importlib.import_module(f"{name}.kinds.more")
    assert more.THREE == 3
    assert ran == ["top", "one", "kinds", "two", "more", "three"]


def test_a_name_the_init_imports_from_a_submodule_is_taken_from_there(
    package: tuple[str, list[str]],
) -> None:
    # The SDK's client needs one class of ``openai.types.chat``; running that package's
    # ``__init__`` for it would import every chat type.
    name, ran = package
    _import_deferring_kinds(name)
    kinds = sys.modules[f"{name}.kinds"]
    assert kinds.TWO == 2
    assert ran == ["top", "one", "two"]
    assert "__getattr__" in kinds.__dict__  # still deferred
    assert kinds.BOTH == 3  # bound by an assignment: only running the __init__ tells
    assert ran == ["top", "one", "two", "kinds"]
    assert "__getattr__" not in kinds.__dict__


def test_from_a_deferred_package_import_a_name_or_a_submodule(
    package: tuple[str, list[str]],
) -> None:
    name, ran = package
    _import_deferring_kinds(name)
    namespace: dict[str, object] = {}
    exec(f"from {name}.kinds import two, BOTH", namespace)
    assert namespace["BOTH"] == 3
    assert getattr(namespace["two"], "TWO", None) == 2
    assert ran.count("kinds") == 1 and ran.count("two") == 1


def test_threads_asking_at_once_see_the_whole_package_and_it_runs_once(
    package: tuple[str, list[str]],
) -> None:
    name, ran = package
    _import_deferring_kinds(name)
    kinds = sys.modules[f"{name}.kinds"]
    seen: list[object] = []
    start = threading.Barrier(4)

    def ask() -> None:
        start.wait()
        seen.append(kinds.BOTH)  # the __init__ sleeps: the others ask while it runs

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen == [3, 3, 3, 3]
    assert ran.count("kinds") == 1


PROBE = """
import json, sys
import flowkit
result = flowkit.run(sys.argv[1], sys.argv[2], cache_dir=sys.argv[3], runs_root=sys.argv[4])
statuses = [r["status"] for r in result.rows()]
import openai
# Response types, the SDK's structured-output parsing (which imports the chat types) and the
# blocking half of its http core (httpcore2, or httpcore under older SDKs): none is needed.
unneeded = (
    "openai.types.responses.response",
    "openai.types.eval_create_params",
    "openai.lib._parsing._completions",
    "httpcore2._sync.connection_pool",
    "httpcore._sync.connection_pool",
)
loaded = sorted(m for m in unneeded if m in sys.modules)
from openai.types import CreateEmbeddingResponse
from openai.types.chat import ChatCompletion
names = [openai.types.chat.ChatCompletion.__name__, CreateEmbeddingResponse.__name__]

# The SDK's public API, which requests take where a private hook is missing.
import asyncio
from flowkit.llm.clients import _build
from flowkit.llm.config import load_settings

async def public():
    settings = load_settings()
    endpoint = settings.check("probe", "judge", None, "flowkit-test", 4)
    client = _build(endpoint)
    try:
        reply = await client.chat.completions.create(
            model="flowkit-test", messages=[{"role": "user", "content": "hi"}]
        )
        return type(reply).__name__, bool(reply.choices[0].message.content)
    finally:
        await client.close()

print(json.dumps({"statuses": statuses, "loaded": loaded, "names": names,
                  "public": list(asyncio.run(public()))}))
"""


@pytest.mark.slow  # a process of its own: about 2 s of start-up
def test_a_judged_run_loads_none_of_the_sdk_types_and_every_name_is_there(
    llm_server: LocalServer, tmp_path: Path
) -> None:
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
    }
    data = EXAMPLES / "qa.jsonl"
    args = ["groundedness", str(data), str(tmp_path / "c"), str(tmp_path / "r")]
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    rows = len([line for line in data.read_text().splitlines() if line.strip()])
    assert report == {
        "statuses": ["ok"] * rows,
        "loaded": [],
        "names": ["ChatCompletion", "CreateEmbeddingResponse"],
        "public": ["ChatCompletion", True],
    }
    assert llm_server.stats()["chat_completions"] == rows + 1


def test_a_submodule_that_imports_a_sibling_before_its_package_ran_does_not_cycle(
    tmp_path: Path,
) -> None:
    # openai 2.31.0's shape: the package's __init__ imports a name from ``tool``, and ``tool``
    # does ``from . import helper``. Imported first (the SDK's client needs it; or a module
    # outside the tree, once the block is over), ``tool`` must get ``helper`` without running
    # the __init__ midway through its own import.
    files = {
        "deferfrom/__init__.py": "",
        "deferfrom/kinds/__init__.py": "from .tool import Tool\nfrom .helper import X\nY = X\n",
        "deferfrom/kinds/tool.py": "from . import helper\nclass Tool:\n    x = helper.X\n",
        "deferfrom/kinds/helper.py": "X = 1\n",
        "deferfrom/kinds/other.py": "OTHER = 2\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    sys.path.insert(0, str(tmp_path))
    try:
        with deferring("deferfrom.kinds"):
            importlib.import_module("deferfrom.kinds")
        tool = importlib.import_module("deferfrom.kinds.tool")
        kinds = sys.modules["deferfrom.kinds"]
        assert tool.Tool.x == 1
        assert kinds.other.OTHER == 2  # a submodule by attribute, the __init__ still deferred
        # Names the __init__ imports from a submodule: taken from there, the __init__ still
        # deferred; one it binds otherwise runs it.
        assert kinds.Tool is tool.Tool and kinds.X == 1
        assert "__getattr__" in kinds.__dict__
        assert kinds.Y == 1
        assert "__getattr__" not in kinds.__dict__
    finally:
        sys.path.remove(str(tmp_path))
        for module in [m for m in sys.modules if m.startswith("deferfrom")]:
            del sys.modules[module]
