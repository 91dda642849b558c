"""The secret scanner: every shape found, placeholders skipped, the secret never kept, and
hostile input handled quickly. Token-shaped strings are generated at test time."""

from __future__ import annotations

import random

import pytest

from apps.analysis.secret_shapes import MAX_TEXT, entropy, fingerprint, redact, scan
from tests.analysis.security_builders import TOKENS, pem_header, random_password

KEY = b"test site key"


@pytest.mark.parametrize("kind", sorted(TOKENS))
@pytest.mark.parametrize("line", ["export TOKEN={}", "--token {} ", "url=https://{}@host/x",
                                  "'{}'", "{}"])
def test_each_token_shape_is_found_and_never_kept(kind, line):
    token = TOKENS[kind](random.Random(kind + line))
    [match] = scan("#!/bin/bash\n" + line.format(token) + "\n", KEY)
    assert match.kind == kind and match.line == 2 and match.length == len(token)
    assert token not in repr(match) and token[4:] not in match.preview
    assert "[REDACTED" in match.preview


def test_private_keys_and_passwords_in_urls():
    password = random_password(random.Random(5))
    found = scan(f"{pem_header()}\ncurl https://bob:{password}@data.example.org/x\n", KEY)
    assert [(m.kind, m.severity, m.line) for m in found] == [
        ("private_key", "high", 1), ("url_password", "medium", 2)]
    assert password not in repr(found)


@pytest.mark.parametrize("line", [
    "export HF_TOKEN=$(cat ~/.cache/huggingface/token)",
    "export HF_TOKEN=${HF_TOKEN}",
    "git clone https://$GITHUB_TOKEN@github.com/acme/x.git",
    "export HF_TOKEN=hf" + "_" + "x" * 34,
    "export API_KEY=<your-api-key>",
    "export PASSWORD=changeme",
    "export WANDB_API_KEY=aaaaaaaaaaaaaaaaaaaaaaaa",
    "curl https://user:$PASS@example.org/",
    "export NCCL_IB_HCA=mlx5_0,mlx5_1",
    "#SBATCH --job-name=tokenizer-train-4096",
    "hf" + "_" + "abcdefghijklmnopqrstuvwxyzABCDEF",  # 32 letters: not the shape
])
def test_placeholders_and_near_misses_are_not_secrets(line):
    assert scan(line, KEY) == []


def test_generic_assignments_need_entropy():
    rng = random.Random(9)
    value = "".join(rng.choice("abcdef0123456789ABCDEF") for _ in range(32))
    [match] = scan(f"export MY_SERVICE_SECRET={value}", KEY)
    assert match.kind == "generic_secret" and match.severity == "medium"


def test_fingerprints_are_keyed_and_stable():
    token = TOKENS["huggingface"](random.Random(1))
    a = scan(token, KEY)[0].fingerprint
    assert a == scan(f"x={token}", KEY)[0].fingerprint  # same secret, same fingerprint
    assert a != scan(token, b"another site")[0].fingerprint
    assert a == fingerprint(token, KEY) and token not in a


def test_previews_mask_other_random_words_and_stay_short():
    token = TOKENS["github"](random.Random(2))
    noise = "Zx81qPlm93Kd02Lsm4Qx71Bv"
    [match] = scan(f"git clone https://{token}@github.com/a.git && echo {noise} " + "y" * 400,
                   KEY)
    assert noise not in match.preview and len(match.preview) <= 160
    assert redact("path /home/alice/venvs/torch/bin/activate", []) == \
        "path /home/alice/venvs/torch/bin/activate"


@pytest.mark.parametrize("text", [
    "a" * 2_000_000,
    ("x" * 30_000 + "\n") * 50,
    "\x00\xff\ufffd" * 10_000,
    "-" * 100_000,
    "https://" + ":" * 50_000 + "@",
    "TOKEN=" + "=" * 100_000,
    "A" * 100_000,
])
def test_hostile_scripts_are_scanned_quickly_and_safely(text):
    assert isinstance(scan(text, KEY), list)


def test_a_secret_past_the_cap_is_not_read():
    token = TOKENS["huggingface"](random.Random(3))
    assert scan("\n" * MAX_TEXT + token, KEY) == []


def test_entropy():
    assert entropy("") == 0 and entropy("aaaa") == 0 and entropy("abcd") == 2.0
