"""One boto3 client per AWS service and options in a container (adapters/aws_clients.py)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

pytest.importorskip("boto3")

from engram.adapters import aws_clients
from engram.adapters.aws_clients import AwsClients, ClientOptions


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str | None, ClientOptions]]:
    """Every client the module builds, recorded (the clients are real boto3 clients: no call is made)."""
    record: list[tuple[str, str | None, ClientOptions]] = []
    real = aws_clients.new_client

    def recording(service: str, region: str | None = None, options: ClientOptions = aws_clients.DEFAULT) -> Any:
        record.append((service, region, options))
        return real(service, region, options)

    monkeypatch.setattr(aws_clients, "new_client", recording)
    return record


def test_one_client_per_service_region_and_options(built: list[tuple[str, str | None, ClientOptions]]) -> None:
    clients = AwsClients("us-east-1")
    short = ClientOptions(connect_timeout=2, read_timeout=5, max_attempts=2, retry_mode="standard")
    first = clients.client("dynamodb")
    assert clients.client("dynamodb") is first
    assert clients.client("sqs", short) is clients.client("sqs", ClientOptions(2, 5, 2, "standard"))
    assert clients.client("sqs") is not clients.client("sqs", short)  # other options: another client
    assert clients.client("dynamodb", region="us-west-2") is not first
    assert [(s, r) for s, r, _ in built] == [
        ("dynamodb", "us-east-1"),
        ("sqs", "us-east-1"),
        ("sqs", "us-east-1"),
        ("dynamodb", "us-west-2"),
    ]
    # A second container builds its own: no client outlives the container that asked for it
    assert AwsClients("us-east-1").client("dynamodb") is not first


def test_options_become_the_clients_config() -> None:
    clients = AwsClients("us-east-1")
    options = ClientOptions(connect_timeout=2, read_timeout=5, max_attempts=2, retry_mode="standard")
    config = clients.client("sqs", options).meta.config
    # botocore counts the first attempt too: 2 retries are 3 attempts in all
    assert (config.connect_timeout, config.read_timeout) == (2, 5)
    assert config.retries == {"mode": "standard", "total_max_attempts": 3}
    assert ClientOptions().config() is None


def test_a_lazy_client_is_built_on_first_use_once_across_threads(
    built: list[tuple[str, str | None, ClientOptions]],
) -> None:
    clients = AwsClients("us-east-1")
    lazy = clients.lazy("sqs")
    assert built == [] and clients.built() == []
    names: list[str] = []
    threads = [threading.Thread(target=lambda: names.append(lazy.meta.service_model.service_name)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert names == ["sqs"] * 8
    assert [s for s, _, _ in built] == ["sqs"] and clients.built() == ["sqs"]
    # and it is the container's client: asked for again, the same one
    assert clients.client("sqs") is lazy._client.built
