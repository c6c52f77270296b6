"""DRA CEL selectors on NVIDIA-shaped devices, evaluated by celpy with our k8s library."""

from __future__ import annotations

from decimal import Decimal

import kubernetes_validate
import pytest

from extender.core.quantity import parse_quantity
from extender.dra import cel
from extender.dra.cel import device_activation, evaluate, matches_all
from extender.dra.kquantity import Quantity
from extender.dra.semver import Semver

from . import nvidia

D = "device.attributes['gpu.nvidia.com']"
C = "device.capacity['gpu.nvidia.com']"


@pytest.fixture
def h100() -> dict:
    return device_activation(nvidia.DRIVER, nvidia.h100_device(0, nvidia.H100_UUIDS[0]))


@pytest.fixture
def mig() -> dict:
    return device_activation(nvidia.DRIVER, nvidia.mig_1g())


def test_fixture_slices_are_valid_v1_objects() -> None:
    for obj in (
        nvidia.h100_slice(),
        nvidia.a100_mig_slice(),
        nvidia.a100_mig_slice(True),
        nvidia.CLASSES["gpu.nvidia.com"],
        nvidia.CLASSES["mig.nvidia.com"],
    ):
        assert kubernetes_validate.validate(obj, "1.37", strict=True) == "1.37"


@pytest.mark.parametrize(
    "expression",
    [
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
        f"{D}.uuid == '{nvidia.H100_UUIDS[0]}'",
        f"{D}.productName.matches('^NVIDIA H100')",
        f"{D}.brand == 'Nvidia' && {D}.architecture == 'Hopper'",
        f"{C}.memory.compareTo(quantity('20Gi')) >= 0",
        f"{C}.memory.isGreaterThan(quantity('79Gi')) && {C}.memory.isLessThan(quantity('80Gi'))",
        f"{C}.memory.add(quantity('1Gi')).isGreaterThan(quantity('80Gi'))",
        f"{C}.memory.sub(85520809984).sign() == 0",
        f"{C}.memory.asInteger() == 85520809984",
        f"{C}.memory == quantity('81559Mi')",
        f"{D}.cudaComputeCapability.compareTo(semver('9.0.0')) == 0",
        f"{D}.cudaComputeCapability.isGreaterThan(semver('8.9.0'))",
        f"{D}.driverVersion.isLessThan(semver('550.127.5'))",
        f"{D}.driverVersion.major() == 550 && {D}.driverVersion.minor() == 90",
        f"{D}.cudaDriverVersion.isGreaterThan(semver('12.2', true))",
        "device.attributes['resource.kubernetes.io'].pciBusID == '0000:18:00.0'",
        "has(device.attributes['gpu.nvidia.com'].uuid)",
        "!has(device.attributes['gpu.nvidia.com'].profile)",
        "device.attributes['dra.example.com'].size() == 0",
        "device.allowMultipleAllocations == false",
    ],
)
def test_true_on_a_full_h100(h100: dict, expression: str) -> None:
    assert evaluate(expression, h100) == cel.CelResult(True)


@pytest.mark.parametrize(
    "expression",
    [
        "device.attributes['gpu.nvidia.com'].type == 'mig'",
        f"{C}.memory.compareTo(quantity('81560Mi')) >= 0",
        f"{D}.cudaComputeCapability.isLessThan(semver('9.0.0'))",
        f"{D}.productName.matches('A100|H200')",
        "device.driver == 'compute-domain.nvidia.com'",
    ],
)
def test_false_on_a_full_h100(h100: dict, expression: str) -> None:
    assert evaluate(expression, h100) == cel.CelResult(False)


def test_qualified_and_short_names_share_the_driver_domain() -> None:
    device = {
        "name": "gpu-0",
        "attributes": {"gpu.nvidia.com/type": {"string": "gpu"}, "uuid": {"string": "GPU-x"}},
    }
    activation = device_activation(nvidia.DRIVER, device)
    assert evaluate(f"{D}.type == 'gpu' && {D}.uuid == 'GPU-x'", activation).matched
    # A short name never lands under another domain.
    assert not evaluate("'uuid' in device.attributes['resource.kubernetes.io']", activation).matched


def test_versions_order_as_semver_not_strings() -> None:
    device = {"name": "gpu-0", "attributes": {"cudaComputeCapability": {"version": "10.0.0"}}}
    activation = device_activation(nvidia.DRIVER, device)
    # As strings '10.0.0' < '9.0.0'; as versions it is greater.
    assert evaluate(f"{D}.cudaComputeCapability.isGreaterThan(semver('9.0.0'))", activation).matched
    assert evaluate(f"{D}.cudaComputeCapability == semver('10.0.0')", activation).matched


def test_mig_device_attributes_and_memory_slices(mig: dict) -> None:
    assert matches_all(
        [
            "device.attributes['gpu.nvidia.com'].type == 'mig'",
            f"{D}.profile == '1g.10gb'",
            f"{D}.parentUUID == '{nvidia.A100_UUID}'",
            f"{C}.memorySlice6.asInteger() == 1",
            f"!has({C}.memorySlice0)",
            f"{C}.multiprocessors.compareTo(quantity('14')) == 0",
            f"{C}.memory.compareTo(quantity('10Gi')) < 0",
        ],
        mig,
    ) == cel.CelResult(True)


@pytest.mark.parametrize(
    ("expression", "error"),
    [
        (f"{D}.index == 0", "no such member in mapping: 'index'"),
        (f"{D}['index'] == 0", "no such key: index"),
        ("device.attributes['gpu.nvidia.com'].type ==", "does not compile"),
        (f"{D}.productName", "yields StringType, not a bool"),
        (f"{D}.productName.matches('(')", "invalid regular expression '(': missing )"),
        (f"{C}.memory.compareTo(quantity('20 Gi')) >= 0", "not a Kubernetes quantity: '20 Gi'"),
        (
            f"{C}.memory.compareTo(20) >= 0",
            "no such overload: cannot compare Quantity with IntType",
        ),
        (f"{C}.memory.compareTo({D}.driverVersion) >= 0", "cannot compare Quantity with Semver"),
        (f"cel.bind(g, {D}, g.type == 'gpu')", "undeclared reference to 'bind'"),
        ("x" * (10 * 1024 + 1), "expression longer than 10240 characters"),
    ],
)
def test_errors_do_not_match_and_are_reported(h100: dict, expression: str, error: str) -> None:
    result = evaluate(expression, h100)
    assert result.matched is False
    assert error in result.error
    assert "activation" not in result.error and len(result.error) <= 300


def test_matches_all_names_the_failing_selector(h100: dict) -> None:
    result = matches_all([f"{D}.type == 'gpu'", f"{D}.index == 0"], h100)
    assert not result.matched
    assert result.error.startswith(f'"{D}.index == 0": no such member')
    assert matches_all([f"{D}.type == 'gpu'", f"{D}.type == 'mig'"], h100) == cel.CelResult(False)


def test_programs_are_cached_by_expression_text() -> None:
    text = f"{C}.memory.compareTo(quantity('33Gi')) >= 0"
    first = cel._program(text)
    assert not isinstance(first, str)
    assert cel._program(text) is first
    assert cel._program(text + " ") is not first


def test_malformed_slice_values_are_left_out_not_raised() -> None:
    device = {
        "name": "gpu-0",
        "attributes": {"driverVersion": {"version": "550.x"}, "type": {"string": "gpu"}},
        "capacity": {"memory": {"value": "lots"}},
    }
    activation = device_activation(nvidia.DRIVER, device)
    assert evaluate(f"{D}.type == 'gpu'", activation).matched
    assert "driverVersion" in evaluate(f"{D}.driverVersion.major() == 550", activation).error
    assert "memory" in evaluate(f"{C}.memory.asInteger() > 0", activation).error


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("20Gi", 20 * 2**30),
        ("81559Mi", 81559 * 2**20),
        ("1.5Gi", 3 * 2**29),
        ("500m", "0.5"),
        ("1e3", 1000),
        ("2E2", 200),
        ("2E", 2 * 10**18),
        ("1k", 1000),
        ("+5", 5),
        ("-1Ki", -1024),
        (".5", "0.5"),
        ("100n", "0.0000001"),
        ("3u", "0.000003"),
        ("Gi", 0),  # Kubernetes' parser reads a bare suffix as zero
    ],
)
def test_quantity_parsing(text: str, value: object) -> None:
    assert parse_quantity(text) == Decimal(str(value))


@pytest.mark.parametrize(
    "text", ["", " 1Gi", "1Gi ", "1_000", "1GiB", "Infinity", "NaN", "1.2.3", "1K", "0x10"]
)
def test_quantity_rejects_what_the_apiserver_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        parse_quantity(text)


def test_quantity_integer_rules() -> None:
    assert Quantity.parse("1Gi").as_integer() == 2**30
    with pytest.raises(ValueError, match="not an int64"):
        Quantity.parse("500m").as_integer()
    with pytest.raises(ValueError, match="too large"):  # Kubernetes caps it; we refuse
        Quantity.parse("9Ei")


@pytest.mark.parametrize(
    ("low", "high"),
    [
        ("1.0.0-alpha", "1.0.0"),
        ("1.0.0-alpha", "1.0.0-alpha.1"),
        ("1.0.0-alpha.1", "1.0.0-alpha.beta"),
        ("1.0.0-beta.2", "1.0.0-beta.11"),
        ("1.0.0-rc.1", "1.0.0"),
        ("9.0.0", "10.0.0"),
        ("550.90.7", "550.127.5"),
    ],
)
def test_semver_precedence(low: str, high: str) -> None:
    a, b = Semver.parse(low), Semver.parse(high)
    assert a.compare(b) == -1 and b.compare(a) == 1
    assert Semver.parse("1.0.0+build.5") == Semver.parse("1.0.0")


def test_semver_strict_unless_normalized() -> None:
    with pytest.raises(ValueError, match="not a semantic version"):
        Semver.parse("v12.4")
    assert Semver.parse("v12.4", normalize=True) == Semver.parse("12.4.0")
    with pytest.raises(ValueError):
        Semver.parse("01.2.3")
