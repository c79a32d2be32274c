"""Secrets never displayed (issue 16 item 3): the SGLang flags that carry a secret (api/spec.py SECRET_FLAGS) are
found by name in every release's flag table, each with a typed field taking a Secret reference, and refused in
``spec.extraArgs`` in either spelling with a message naming that field and never the value."""

from __future__ import annotations

import re

import pytest

from e2e.tests.test_invalid_specs import valid_server
from sglang_operator.api import SpecError, parse
from sglang_operator.api.spec import OWNED, SECRET_FLAGS, SGLangServerSpec
from sglang_operator.builders.command import SECRET_ENV
from sglang_operator.sglang.flags import load_table
from sglang_operator.sglang.versions import SUPPORTED

SECRETISH = re.compile(r"key|password|token|secret")
"""Words in a flag's name that may mean its value is a secret."""

COUNT = "a number of tokens (a size, limit or ratio), not a secret"
TOKENIZER = "a tokenizer setting (a path, mode, backend, count or switch), not a secret"
BUCKETS = "histogram buckets of the metrics (numbers), not a secret"
FILE = "the path of a file (the file's content is mounted from a volume), not a secret"
EXEMPT: dict[str, str] = {
    "--bucket-inter-token-latency": BUCKETS,
    "--bucket-time-to-first-token": BUCKETS,
    "--generation-tokens-buckets": BUCKETS,
    "--prompt-tokens-buckets": BUCKETS,
    "--collect-tokens-histogram": "a switch of the metrics, not a secret",
    "--detokenizer-worker-num": "a process count (detokenizer workers), not a secret",
    "--disable-tokenizer-batch-decode": TOKENIZER,
    "--dynamic-batch-tokenizer-batch-size": TOKENIZER,
    "--dynamic-batch-tokenizer-batch-timeout": TOKENIZER,
    "--enable-dynamic-batch-tokenizer": TOKENIZER,
    "--enable-tokenizer-batch-encode": TOKENIZER,
    "--skip-tokenizer-init": TOKENIZER,
    "--tokenizer-backend": TOKENIZER,
    "--tokenizer-mode": TOKENIZER,
    "--tokenizer-path": TOKENIZER,
    "--tokenizer-worker-num": TOKENIZER,
    "--tokenizer-metrics-allowed-custom-labels": "label names of the tokenizer's metrics, not a secret",
    "--tokenizer-metrics-custom-labels-header": "the name of an HTTP header carrying metric labels, not a secret",
    "--ds-heavy-token-num": COUNT,
    "--kt-max-deferred-experts-per-token": COUNT,
    "--max-prefill-tokens": COUNT,
    "--max-total-tokens": COUNT,
    "--num-reserved-decode-tokens": COUNT,
    "--piecewise-cuda-graph-max-tokens": COUNT,
    "--piecewise-cuda-graph-tokens": COUNT,
    "--prefill-delayer-token-usage-low-watermark": COUNT,
    "--sampling-mask-max-tokens": COUNT,
    "--speculative-dspark-align-verify-tokens-to-graph-tier": "a speculative-decoding switch, not a secret",
    "--speculative-ngram-external-corpus-max-tokens": COUNT,
    "--speculative-num-draft-tokens": COUNT,
    "--swa-full-tokens-ratio": COUNT,
    "--tbo-token-distribution-threshold": COUNT,
    "--speculative-token-map": FILE,
    "--ssl-keyfile": FILE,
}
"""Flags whose name matches :data:`SECRETISH` but whose value is no secret, with the reason."""


def _secretish_options() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for version in SUPPORTED:
        for spec in load_table(version).flags:
            for option in spec.options:
                if SECRETISH.search(option):
                    found.setdefault(option, set()).add(str(version))
    return found


def test_every_secretish_flag_is_a_secret_or_exempted_with_a_reason() -> None:
    found = _secretish_options()
    unclassified = sorted(set(found) - set(SECRET_FLAGS) - set(EXEMPT))
    assert unclassified == [], ("add each to api/spec.py SECRET_FLAGS (with a typed SecretKeyRef field) or to "
                                f"EXEMPT here with the reason: {unclassified}")
    assert not set(SECRET_FLAGS) & set(EXEMPT)
    assert all(EXEMPT.values())
    stale = sorted((set(SECRET_FLAGS) | set(EXEMPT)) - set(found))
    assert stale == [], f"in no supported release: {stale}"  # the lists follow the tables


def test_every_secret_flag_has_a_typed_field_an_env_var_and_is_owned() -> None:
    fields = {f.alias for f in SGLangServerSpec.model_fields.values()} | set(SGLangServerSpec.model_fields)
    for flag, field in SECRET_FLAGS.items():
        assert OWNED[flag] == field
        assert field.removeprefix("spec.") in fields, field
        assert SECRET_ENV[flag].startswith("SGLANG_"), flag
    assert set(SECRET_ENV) == set(SECRET_FLAGS)
    assert len(set(SECRET_ENV.values())) == len(SECRET_ENV)


def _refusal(extra_args: list[str]) -> str:
    body = valid_server()
    body["spec"]["extraArgs"] = extra_args
    with pytest.raises(SpecError) as err:
        parse(body)
    return str(err.value)


@pytest.mark.parametrize("flag", sorted(SECRET_FLAGS))
@pytest.mark.parametrize("spelling", ["separate", "equals", "abbreviated"])
def test_a_secret_flag_in_extra_args_is_refused_naming_the_field_never_the_value(flag: str, spelling: str) -> None:
    value = "s3cr3t-VALUE-9f1c"
    name = flag[:-2] if spelling == "abbreviated" else flag
    args = [f"{name}={value}"] if spelling == "equals" else ["--page-size", "64", name, value]
    message = _refusal(args)
    assert f"spec.extraArgs: {name} takes a secret" in message and SECRET_FLAGS[flag] in message, message
    assert value not in message


def test_a_long_extra_args_item_is_not_echoed() -> None:
    """pydantic's "string too long" would quote the item: an extraArgs item may be a secret."""
    value = "x" * 600
    message = _refusal(["--page-size", value])
    assert "spec.extraArgs.1" in message and value[:100] not in message


def test_the_key_file_path_itself_is_not_taken_for_an_abbreviation_of_its_password() -> None:
    """``--ssl-keyfile`` (a real flag, a path) is a prefix of ``--ssl-keyfile-password``: argparse matches it
    exactly, so extraArgs may carry it (the CEL rule and its Python twin both exempt it)."""
    body = valid_server()
    body["spec"]["extraArgs"] = ["--ssl-keyfile", "/tls/key.pem", "--ssl-certfile=/tls/cert.pem"]
    assert parse(body).spec.extra_args[0] == "--ssl-keyfile"
    body["spec"]["extraArgs"] = ["--ssl-keyfile=/tls/key.pem"]
    assert parse(body).spec.extra_args == ["--ssl-keyfile=/tls/key.pem"]


def test_the_importer_drops_every_secret_flag_with_a_note() -> None:
    from sglang_operator.plugin.importer import import_command

    argv = ["python3", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3.6-27B", "--api-key", "sk-1",
            "--admin-api-key=sk-2", "--ssl-keyfile", "/tls/key.pem", "--ssl-keyfile-password", "pw-3"]
    out = import_command(argv, {}, image="lmsysorg/sglang:v0.5.10-cu129")
    text = repr(out.server)
    assert not any(v in text for v in ("sk-1", "sk-2", "pw-3")), text
    assert out.server["spec"]["extraArgs"] == ["--ssl-keyfile", "/tls/key.pem"]
    for flag, field in SECRET_FLAGS.items():
        assert any(n.startswith(f"{flag} dropped (a secret)") and field in n for n in out.notes), out.notes
