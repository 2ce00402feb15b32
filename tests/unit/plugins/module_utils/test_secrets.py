# SPDX-License-Identifier: GPL-3.0-or-later
"""The one masking rule (plugins/module_utils/_secrets.py), used by the modules, the filters and the launcher that
runs on the host (roles/server/files/sglang_launch.py, which carries the rule's block byte for byte).

Generated: every combination of secret field name x separator x quoting x secret alphabet (shell-special
characters, unicode), in every form it is printed in (flag, argv list, repr, dict, JSON, YAML, keyword, env,
Authorization header), embedded between non-secret text: the secret never survives masking, the text around it
is left as it was. Hypothesis draws the names, separators, quotings and secrets; the forms of SGLang's own lines
(ServerArgs repr, server_args dict, JSON) are rendered by Python's repr and json as SGLang renders them."""
import itertools
import json
import os
import random
import string

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from ansible_collections.gpuserve.sglang.plugins.filter import sglang_secrets as filters
from ansible_collections.gpuserve.sglang.plugins.module_utils import _secrets
from ansible_collections.gpuserve.sglang.plugins.module_utils import _sglang_logs as logs
from ansible_collections.gpuserve.sglang.plugins.module_utils import _strays
from conftest import ROOT, load_file

LAUNCHER = os.path.join(ROOT, "roles", "server", "files", "sglang_launch.py")
SYNC = os.path.join(ROOT, "scripts", "sync-masking-rule.py")
# every secret the collection manages, in the spellings they are printed in: SGLang's fields and flags, the
# secrets file's own keys, the gateways' (SMG 1.13, the sglang router), tokens, and any *_key/*secret*/*password*
NAMES = ["api_key", "admin_api_key", "API_KEY", "api-key", "admin-api-key", "router_api_key", "router-api-key",
         "control-plane-api-keys", "control_plane_api_keys", "tenant-api-key", "oracle-password", "hf_token",
         "HF_TOKEN", "hf-token", "HUGGING_FACE_HUB_TOKEN", "SGLANG_API_KEY", "client_secret", "secret_key",
         "db_password", "watermark_secret", "apikey", "X-API-Key", "wallet-passwd", "aws_credentials"]
SEPARATORS = [" ", "=", ": ", " = ", "\": \"", ":", " : ", "\t"]
QUOTES = ["", "'", "\""]
# secret alphabets: plain, shell-special, unicode (no blanks: an unquoted secret ends at a blank)
PLAIN = string.ascii_letters + string.digits + "-_"
SHELL = "$`!&|;<>(){}[]*?~#%^+,.:/@=\\'\""
UNICODE = "Ωмега鍵ключ€🔑é\u00a0ß"
# non-secret text around the field: words and numbers SGLang prints (none is a secret name)
OTHERS = {"model_path": "/srv/models/Kimi-K2.5", "max_total_num_tokens": 159277, "tp_size": 8,
          "hicache_ratio": 4.0, "tokenizer_path": "/srv/models/tok", "max_new_tokens": 16,
          "sglang_secrets_file": "/etc/sglang/sglang-kimi.secrets.yaml"}
AROUND = ["[2026-12-02 10:00:00 TP0] Load weight begin. avail mem=94.13 GB", "#new-token: 7, #cached-token: 0,",
          "max_total_num_tokens=159277", "--tp 8 --port 30000", "token usage: 0.00", "tokenizer_path=/srv/tok",
          "--config /etc/sglang/sglang-kimi.secrets.yaml", "model_path='/m'", "ok"]
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


_LAUNCHER = []


def launcher():
    """The launcher as the host runs it (loaded once)."""
    if not _LAUNCHER:
        _LAUNCHER.append(load_file("sglang_launch_under_test", LAUNCHER))
    return _LAUNCHER[0]


def _quoted(value, quote):
    """The value in quote as a repr or a shell word gives it: the quote and the backslash escaped."""
    if not quote:
        return value
    return quote + value.replace("\\", "\\\\").replace(quote, "\\" + quote) + quote


def render(name, separator, quote, value):
    """name + separator + value in one of the forms a secret is printed in."""
    if separator == "\": \"":      # JSON: the separator brings its own quotes
        return json.dumps({name: value}, ensure_ascii=False)[1:-1]
    return name + separator + _quoted(value, quote)


def _raw_forms(value):
    """How the secret itself can appear: as given, escaped by repr or JSON or a quoting."""
    forms = {value, repr(value)[1:-1], json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]}
    forms.update(_quoted(value, quote)[1:-1] for quote in ("'", "\""))
    return {form for form in forms if form}


def _secret(alphabet, min_size=1):
    return st.text(alphabet=alphabet, min_size=min_size, max_size=24).filter(
        lambda v: not _secrets._EMPTY_RE.match(v) and v.strip() == v and not any(c.isspace() for c in v))


SECRETS = st.one_of(_secret(PLAIN, 6), _secret(PLAIN + SHELL, 6), _secret(PLAIN + UNICODE, 6),
                    _secret(PLAIN + SHELL + UNICODE, 6))


def _assert_masked(text, value, masked, context=""):
    """No form of the secret in the masked text. ``context``: the text without the secret (a secret that the
    text around it happens to hold, "Server" in "ServerArgs", is not drawn)."""
    assume(not any(raw in context + _secrets.MASK for raw in _raw_forms(value)))
    for raw in _raw_forms(value):
        assert raw not in masked, (text, masked, raw)
    assert _secrets.MASK in masked


@SETTINGS
@given(name=st.sampled_from(NAMES), separator=st.sampled_from(SEPARATORS), quote=st.sampled_from(QUOTES),
       value=SECRETS, before=st.sampled_from(AROUND), after=st.sampled_from(AROUND),
       dashes=st.sampled_from(["", "--"]))
def test_generated_fields_are_masked_and_the_text_around_them_is_kept(name, separator, quote, value, before, after,
                                                                      dashes):
    if separator == "\": \"":
        dashes = ""
    if not quote and any(c in value for c in "'\""):
        quote = "\""   # an unquoted value that holds a quote is ambiguous: a repr or a shell quotes it
    field = render(dashes + name, separator, quote, value)
    text = before + " " + field + " " + after
    masked = _secrets.mask(text)
    _assert_masked(text, value, masked, before + " " + dashes + name + " " + after)
    # the text around the field is untouched: it is there as it was, in its place
    assert masked.startswith(before + " ") and masked.endswith(" " + after), (text, masked)
    # one rule: the launcher's copy, the filter and the modules' helper give the same text
    assert launcher().mask(text) == masked
    assert filters.sglang_mask(text) == masked
    assert logs.mask_secrets(text) == masked


@SETTINGS
@given(name=st.sampled_from([n for n in NAMES if "-" in n or n.islower()]), value=SECRETS,
       style=st.sampled_from(["list", "json-list", "flag=", "quoted-flag="]))
@example(name="api_key", value="--port", style="list")   # found by make test: a secret that is the next flag itself
def test_generated_argv_lists_and_flags_are_masked(name, value, style):
    flag = "--" + name.lower().replace("_", "-")
    argv = ["python3", "-m", "sglang.launch_server", "--tp", "8"]
    if style in ("list", "json-list"):
        argv += [flag, value, "--port", "30000"]
        text = repr(argv) if style == "list" else json.dumps(argv, ensure_ascii=False)
    else:
        argv += [flag + "=" + value, "--port", "30000"]
        text = repr(argv) if style == "quoted-flag=" else " ".join(argv)
        if style == "flag=" and any(c in value for c in "'\""):
            text = repr(argv)
    masked = _secrets.mask(text)
    # the context: every word of the command line but the secret (a secret that is one of them is not drawn)
    _assert_masked(text, value, masked, " ".join(argv[:5]) + flag + " --port 30000")
    assert "'--port'" in masked or "\"--port\"" in masked or "--port 30000" in masked
    assert launcher().mask(text) == masked


@SETTINGS
@given(name=st.sampled_from(["api_key", "admin_api_key", "hf_token"]), value=SECRETS,
       form=st.sampled_from(["repr", "dict", "json"]), seed=st.integers(0, 1000))
@example(name="api_key", value="sglang_secrets_file", form="dict", seed=0)   # found by CI: a value named like a field
def test_generated_sglang_server_args_are_masked_and_the_other_fields_kept(name, value, form, seed):
    """SGLang 0.5.9's ServerArgs(...) repr, 0.5.23's server_args={...} dict, a JSON answer (/get_server_info)."""
    items = list(OTHERS.items()) + [(name, value)]
    random.Random(seed).shuffle(items)
    fields = dict(items)

    def printed(fields):
        if form == "repr":
            return "server_args=ServerArgs(%s)" % ", ".join("%s=%r" % kv for kv in fields.items())
        if form == "dict":
            return "server_args=%r" % (fields,)
        return json.dumps({"server_args": fields, "launch_command": "x"}, ensure_ascii=False)

    text = printed(fields)
    masked = _secrets.mask(text)
    # the context: the same text with the secret's value empty (a value equal to another field's name or value,
    # e.g. 'sglang_secrets_file', is not drawn: removing it from the text would remove that field too)
    _assert_masked(text, value, masked, printed(dict(fields, **{name: ""})))
    for key in ("max_total_num_tokens", "max_new_tokens", "tokenizer_path", "sglang_secrets_file"):
        assert key in masked and str(OTHERS[key]) in masked
    assert launcher().mask(text) == masked


@SETTINGS
@given(value=SECRETS, around=st.text(max_size=30))
def test_a_known_secret_is_masked_wherever_it_appears(value, around):
    text = around + value + around + repr(value) + json.dumps(value) + around
    masked = _secrets.mask(text, [value])
    for raw in _raw_forms(value):
        assert raw not in masked
    assert filters.sglang_mask(text, [value, ""]) == masked
    assert filters.sglang_mask([text, text], value) == [masked, masked]


@SETTINGS
@given(text=st.text(alphabet=string.ascii_letters + string.digits + " .,:;=/()[]{}#-+\n", max_size=80))
def test_text_without_a_secret_name_is_left_alone(text):
    if any(_secrets.NAME_RE.search(word) for word in text.replace(":", " ").replace("=", " ").split()):
        return   # a word that names a secret (random letters can spell "apikey"): not this test's text
    if "bearer" in text.lower() or "basic" in text.lower():
        return
    assert _secrets.mask(text) == text
    assert launcher().mask(text) == text


# the forms named in issue 41, one by one (the generated tests above cover their combinations)
@pytest.mark.parametrize("text,secret", [
    ("python -m sglang.launch_server --api-key sk-live-0523 --port 30000", "sk-live-0523"),
    ("--api-key=sk-live-0523", "sk-live-0523"),
    ("launch_command: ['python', '-m', 'sglang.launch_server', '--api-key', 'sk-live-0523', '--tp', '8']", "sk-live-0523"),
    ("api_key: sk-live-0523", "sk-live-0523"),
    ("api-key: sk-live-0523\nadmin-api-key: adm-0523\n", "adm-0523"),
    ("admin-api-key: adm-0523", "adm-0523"),
    ("api_key = 'sk-live-0523'", "sk-live-0523"),
    ("ServerArgs(model_path='/m', api_key='sk-live-0523', tp_size=8)", "sk-live-0523"),
    ('{"api_key": "sk-live-0523", "tp_size": 8}', "sk-live-0523"),
    ("curl -H 'Authorization: Bearer sk-live-0523' http://127.0.0.1:30000/v1/models", "sk-live-0523"),
    ("smg --control-plane-api-keys cp-0523 --tenant-api-key tn-0523 --oracle-password or-0523", "cp-0523"),
    ("smg --control-plane-api-keys cp-0523 --tenant-api-key tn-0523 --oracle-password or-0523", "tn-0523"),
    ("smg --control-plane-api-keys cp-0523 --tenant-api-key tn-0523 --oracle-password or-0523", "or-0523"),
    ("sglang_router --api-key rt-0523", "rt-0523"),
    ("server_args=ServerArgs(hf_token='hf_abc0523')", "hf_abc0523"),
    ("Environment=HF_TOKEN=hf_abc0523 NCCL_DEBUG=WARN", "hf_abc0523"),
])
def test_the_forms_the_issue_names(text, secret):
    masked = _secrets.mask(text)
    assert secret not in masked and _secrets.MASK in masked
    assert launcher().mask(text) == masked


def test_the_launcher_carries_the_rule_byte_for_byte():
    sync = load_file("sync_masking_rule_under_test", SYNC)
    with open(LAUNCHER, encoding="utf-8") as handle:
        text = handle.read()
    start, end = sync.block(text, LAUNCHER)
    assert text[start:end] == sync.rule(), "run scripts/sync-masking-rule.py"
    assert sync.main(["--check"]) == 0


def test_the_sync_script_restores_a_launcher_whose_rule_was_changed(tmp_path, monkeypatch):
    sync = load_file("sync_masking_rule_under_test", SYNC)
    with open(LAUNCHER, encoding="utf-8") as handle:
        original = handle.read()
    changed = tmp_path / "sglang_launch.py"
    changed.write_text(original.replace("(?:apikeys?|", "(?:apikey|"), encoding="utf-8")
    monkeypatch.setattr(sync, "LAUNCHER", str(changed))
    assert sync.main(["--check"]) == 1
    assert sync.main([]) == 0
    assert changed.read_text(encoding="utf-8") == original


@pytest.mark.parametrize("text", [
    "server_args=ServerArgs(api_key=None, admin_api_key=None, tp_size=8)",
    "server_args={'api_key': None, 'admin_api_key': None, 'tp_size': 8}",
    '{"api_key": null, "tp_size": 8}',
    "api_key: ''",
    "max_total_num_tokens=159277, chunked_prefill_size=8192, max_prefill_tokens=16384",
    "[2026-12-02 10:00:00 TP0] Allocating kv hierarchical KV host pool: 637109 tokens, 44.77 GB host memory.",
    "Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00",
    "sglang_secrets_file: /etc/sglang/sglang-kimi.secrets.yaml",
    "ExecStart=/opt/sglang/venv/bin/python /opt/sglang/launch.py -m sglang.launch_server --config /etc/sglang/x.secrets.yaml",
])
def test_what_holds_no_secret_is_left_alone(text):
    assert _secrets.mask(text) == text
    assert launcher().mask(text) == text


def test_names_and_mappings():
    assert all(_secrets.is_secret_name(name) for name in NAMES)
    for name in ("NCCL_DEBUG", "HF_HUB_OFFLINE", "max_total_num_tokens", "tokenizer_path", "sglang_secrets_file",
                 "hf_token_path", "key", "token", "secret_name"):
        assert not _secrets.is_secret_name(name), name
    assert _secrets.mask_mapping({"SGLANG_API_KEY": "k", "X": "1", "EMPTY_TOKEN": ""}) == {
        "SGLANG_API_KEY": "********", "X": "1", "EMPTY_TOKEN": ""}


def test_config_secrets_reads_the_secrets_file_the_role_writes():
    assert _secrets.config_secrets("api-key: 'sk-1'\nadmin-api-key: \"adm 2\"\nmodel: x\n") == ["sk-1", "adm 2"]
    assert _secrets.config_secrets("") == [] and _secrets.config_secrets(None) == []


def test_none_lists_and_the_strays_command_lines():
    assert _secrets.mask(None) is None and _secrets.mask("") == ""
    assert _secrets.mask(["--api-key k1", "x"]) == ["--api-key ********", "x"]
    assert "k1" not in _strays.mask("/usr/bin/python3 -m sglang.launch_server --api-key k1 --port 1")


@pytest.mark.parametrize("name,value", list(itertools.product(["api_key", "hf_token"], ["a", "None"])))
def test_short_and_empty_looking_values(name, value):
    masked = _secrets.mask("%s='%s'" % (name, value))
    assert masked == "%s='********'" % name
