"""How the services sign in to Kafka, from their settings (pure)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import SecretStr, ValidationError

from refund_bench.config import StackSettings, StageSettings
from refund_bench.errors import DlqLimitExceeded
from refund_bench.service import runtime_config


def test_by_default_the_clients_speak_plaintext() -> None:
    assert StackSettings().kafka_security_config() == {"security.protocol": "PLAINTEXT"}


def test_sasl_over_tls_gives_the_mechanism_credentials_and_ca() -> None:
    settings = StackSettings(
        kafka_security_protocol="SASL_SSL",
        kafka_sasl_username="payout",
        kafka_sasl_password=SecretStr("s3cret-pw"),
        kafka_ssl_ca_location="/etc/kafka/ca.crt",
    )
    assert settings.kafka_security_config() == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "payout",
        "sasl.password": "s3cret-pw",
        "ssl.ca.location": "/etc/kafka/ca.crt",
    }
    assert "s3cret-pw" not in repr(settings)


def test_mutual_tls_gives_the_client_certificate_and_no_sasl() -> None:
    settings = StackSettings(
        kafka_security_protocol="SSL",
        kafka_ssl_certificate_location="/etc/kafka/user.crt",
        kafka_ssl_key_location="/etc/kafka/user.key",
        kafka_ssl_key_password=SecretStr("key-pw"),
    )
    assert settings.kafka_security_config() == {
        "security.protocol": "SSL",
        "ssl.certificate.location": "/etc/kafka/user.crt",
        "ssl.key.location": "/etc/kafka/user.key",
        "ssl.key.password": "key-pw",
    }


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"kafka_security_protocol": "SASL_SSL", "kafka_sasl_username": "payout"},
            "KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD",
        ),
        (
            {
                "kafka_security_protocol": "SASL_PLAINTEXT",
                "kafka_sasl_password": SecretStr("pw-without-a-user"),
            },
            "KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD",
        ),
        (
            {"kafka_security_protocol": "SSL", "kafka_ssl_certificate_location": "/c.crt"},
            "KAFKA_SSL_CERTIFICATE_LOCATION and KAFKA_SSL_KEY_LOCATION go together",
        ),
        ({"kafka_security_protocol": "sasl"}, "kafka_security_protocol"),
    ],
)
def test_incomplete_sign_in_settings_are_refused_at_start(
    fields: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError, match=message) as refused:
        StackSettings(**fields)
    assert "pw-without-a-user" not in str(refused.value)


def test_every_client_of_a_stage_gets_the_sign_in_and_its_repr_hides_it() -> None:
    settings = StageSettings(
        kafka_security_protocol="SASL_SSL",
        kafka_sasl_username="tally",
        kafka_sasl_password=SecretStr("tally-pw"),
    )
    config = runtime_config(settings, "tally")
    assert config.kafka_security == settings.kafka_security_config()
    assert "tally-pw" not in repr(config)


def test_an_explicit_transactional_id_keeps_the_stages_prefix() -> None:
    assert runtime_config(StageSettings(transactional_id="tally-7"), "tally").transactional_id == (
        "tally-7"
    )
    assert runtime_config(StageSettings(), "tally").transactional_id.startswith("tally-")
    with pytest.raises(ValueError, match="'pricing-7' must begin with 'tally-'"):
        runtime_config(StageSettings(transactional_id="pricing-7"), "tally")
    # An at-least-once stage opens no transaction, so its id is not checked.
    relaxed = StageSettings(transactional_id="recorder", guarantee="at-least-once")
    assert runtime_config(relaxed, "recorder").transactional_id == "recorder"


def test_the_consumer_group_is_the_stages_name_unless_set() -> None:
    assert runtime_config(StageSettings(), "tally").group_id == "tally"
    assert runtime_config(StageSettings(consumer_group="tally-probe-1"), "tally").group_id == (
        "tally-probe-1"
    )


def test_the_dlq_budget_is_a_setting_and_one_never_trips_it() -> None:
    """The default stops a stage once most of its recent input went to the DLQ; a replay known
    to dead-letter most of what it reads runs with ``DLQ_MAX_FRACTION=1``."""
    default = runtime_config(StageSettings(), "pricing").dlq_budget
    for _ in range(100):
        default.record(True)
    with pytest.raises(DlqLimitExceeded, match="101 of the last 101"):
        default.record(True)
    replay = runtime_config(StageSettings.model_validate({"dlq_max_fraction": 1}), "pricing")
    for _ in range(1000):
        replay.dlq_budget.record(True)
    for wrong in (0, 1.5):
        with pytest.raises(ValidationError, match="dlq_max_fraction"):
            StageSettings.model_validate({"dlq_max_fraction": wrong})


def test_the_dlq_budget_remembers_every_record_a_put_back_may_poll_again() -> None:
    """A batch put back is polled again, its records counted once: the budget remembers at
    least a stage's pending records and a batch, however large they are set."""
    assert runtime_config(StageSettings(), "pricing").dlq_budget.remembered == 10_000
    large = StageSettings.model_validate({"max_pending_records": 20_000, "batch_max_records": 900})
    budget = runtime_config(large, "pricing").dlq_budget
    assert budget.remembered == 20_900
    for _ in range(2):  # 20,900 records whose first and last 60 failed, read twice
        for offset in range(20_900):
            failed = offset < 60 or offset >= 20_840
            budget.record(failed, ("verdict.decided", 0, offset))
