"""The e2e harness's own logic, on CPU, without SGLang: a stand-in launcher module (a few lines of http.server that
answer with SGLang's JSON shapes) is started through `Server` exactly as `python -m sglang.launch_server` would be.
Real servers are exercised by test/registered/spec/test_gemma4_dflash_tiny.py and scripts/gpu/run_tiny_e2e.py."""

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest
from sglang_gemma4_dflash_testkit import e2e

FAKE_LAUNCHER = textwrap.dedent('''
    """Answers like an SGLang server. --mode: ok | old (no /server_info: the older spelling only) | exit | never | slow."""
    import argparse, json, os, subprocess, sys, time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    p = argparse.ArgumentParser()
    p.add_argument("--model-path"); p.add_argument("--host"); p.add_argument("--port", type=int)
    p.add_argument("--mode", default="ok"); p.add_argument("--child-pid-file")
    a, _ = p.parse_known_args()
    print("fake server starting", a.mode, flush=True)
    if a.child_pid_file:  # a child in the same process group, like SGLang's scheduler process
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open(a.child_pid_file, "w").write(str(child.pid))
    if a.mode == "exit":
        print("fatal: the draft model is not supported", flush=True); sys.exit(3)
    if a.mode == "slow":
        time.sleep(600)
    INFO = {"speculative_algorithm": "DFLASH", "speculative_num_draft_tokens": 16,
            "speculative_draft_attention_backend": "triton", "attention_backend": "triton",
            "disable_cuda_graph": False, "disable_piecewise_cuda_graph": True, "version": "0.5.13",
            "internal_states": [{"avg_spec_accept_length": 4.5}]}

    class H(BaseHTTPRequestHandler):
        def log_message(self, *args): pass
        def send(self, code, obj):
            body = json.dumps(obj).encode()
            self.send_response(code); self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
        def do_GET(self):
            if a.mode == "never" and self.path != "/get_model_info":
                return self.send(503, {"error": "not ready"})
            if self.path == "/server_info" and a.mode == "old":
                return self.send(404, {"detail": "Not Found"})
            if self.path in ("/server_info", "/get_server_info"):
                return self.send(200, INFO)
            if self.path in ("/get_model_info", "/health_generate"):
                return self.send(200, {"model_path": a.model_path})
            self.send(404, {"detail": "Not Found"})
        def do_POST(self):
            req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/generate":
                n = req["sampling_params"]["max_new_tokens"]
                src = req.get("input_ids") or [ord(c) for c in req["text"]]
                time.sleep(0.2)  # lets concurrent requests overlap
                return self.send(200, {"text": "x" * n, "output_ids": [(t + 1) % 100 for t in src][:n],
                                       "meta_info": {"sampling_params": req["sampling_params"]}})
            if self.path == "/v1/completions":
                return self.send(200, {"choices": [{"text": req["prompt"][::-1]}], "model": req["model"]})
            self.send(404, {"detail": "Not Found"})

    ThreadingHTTPServer((a.host, a.port), H).serve_forever()
''')


@pytest.fixture
def launcher(tmp_path):
    """A module name `python -m` can run, plus the env that puts it on the path."""
    (tmp_path / "fake_sglang_server.py").write_text(FAKE_LAUNCHER)
    env = {"PYTHONPATH": str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return "fake_sglang_server", env


def test_command_uses_given_launcher_module():
    s = e2e.Server("/m", ["--tp-size", 2], launcher=e2e.CPU_LAUNCHER, port=1234)
    assert s.command() == [
        sys.executable,
        "-m",
        "sglang_gemma4_dflash_testkit.cpu_server",
        "--model-path",
        "/m",
        "--host",
        "127.0.0.1",
        "--port",
        "1234",
        "--tp-size",
        "2",
    ]


def test_server_roundtrip_generate_info_and_group_kill(launcher, tmp_path):
    module, env = launcher
    pid_file = tmp_path / "child.pid"
    server = e2e.Server(
        "/models/tiny",
        ["--mode", "ok", "--child-pid-file", str(pid_file)],
        launcher=module,
        env=env,
        ready_timeout=30,
        poll_interval=0.1,
    )
    with server:
        pgid = server.process.pid
        out = e2e.generate(server.base_url, [1, 2, 3], max_new_tokens=2)
        assert out.output_ids == [2, 3]
        assert out.meta_info["sampling_params"] == {"temperature": 0.0, "max_new_tokens": 2}
        assert e2e.generate(server.base_url, "ab", max_new_tokens=5).output_ids == [98, 99]
        start = time.monotonic()
        many = e2e.generate_many(server.base_url, [[i] for i in range(8)], max_new_tokens=1, concurrency=8)
        elapsed = time.monotonic() - start
        assert [g.output_ids for g in many] == [[i + 1] for i in range(8)]  # order kept
        assert elapsed < 8 * 0.2, "requests did not overlap"
        suite = e2e.greedy_suite(server.base_url, [[i] for i in range(5)], 1, concurrent=3, ignore_eos=True)
        assert [g.output_ids for g in suite] == [[i + 1] for i in range(5)]
        assert all(g.meta_info["sampling_params"]["ignore_eos"] is True for g in suite)
        assert e2e.complete(server.base_url, "m", "abc", 4)["choices"][0]["text"] == "cba"
        summary = e2e.spec_summary(e2e.server_info(server.base_url))
        assert summary.speculative_algorithm == "DFLASH" and summary.speculative_num_draft_tokens == 16
        assert summary.avg_spec_accept_length == 4.5 and summary.cuda_graph_on
        child = int(pid_file.read_text())
        assert e2e.group_alive(pgid)
    assert server.process is None
    deadline = time.monotonic() + 10
    while e2e.group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not e2e.group_alive(pgid), "a process of the server's group survived stop()"
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)


def test_a_server_already_on_the_port_does_not_pass_for_a_new_one(launcher):
    """The soak's server once took the answers of a matrix server started on the same port as its own readiness,
    then failed to bind and exited; the soak's traffic went to the other server. Readiness counts only if this
    server's process group listens on the port."""
    module, env = launcher
    with e2e.Server("/m", ["--mode", "ok"], launcher=module, env=env, ready_timeout=30, poll_interval=0.1) as first:
        second = e2e.Server("/m", ["--mode", "slow"], launcher=module, env=env, port=first.port, ready_timeout=30,
                            poll_interval=0.1)  # fmt: skip
        try:
            with pytest.raises(e2e.ServerError, match=f"port {first.port} answers, but from process.*another server"):
                second.start().wait_ready()
        finally:
            second.stop()
        assert e2e.http_ok(first.base_url + "/get_model_info", timeout=5)  # the first one is untouched


def test_a_server_stopped_while_its_port_answers_is_a_clear_error(launcher):
    """On the GPU, `timeout` SIGTERMed a probe while two of its servers were coming up: the handler stopped them and
    their readiness check, between the port's answer and its owner check, failed with an AttributeError."""
    module, env = launcher
    with e2e.Server("/m", ["--mode", "ok"], launcher=module, env=env, ready_timeout=30, poll_interval=0.1) as first:
        stopped = e2e.Server("/m", launcher=module, env=env, port=first.port)  # never started, or stopped since
        with pytest.raises(e2e.ServerError, match=f"server on port {first.port} was stopped while waiting"):
            stopped._check_port_is_ours()


def test_server_info_falls_back_to_old_endpoint(launcher):
    module, env = launcher
    with e2e.Server("/m", ["--mode", "old"], launcher=module, env=env, ready_timeout=30, poll_interval=0.1) as s:
        assert e2e.server_info(s.base_url)["version"] == "0.5.13"
        with pytest.raises(e2e.HTTPRequestError, match="HTTP 404"):
            e2e.http_json(s.base_url + "/server_info")


def test_early_exit_is_reported_with_log_tail(launcher):
    module, env = launcher
    server = e2e.Server("/m", ["--mode", "exit"], launcher=module, env=env, ready_timeout=30, poll_interval=0.1)
    with pytest.raises(e2e.ServerError, match=r"(?s)exited with code 3.*draft model is not supported"):
        with server:
            pass
    assert server.process is None
    assert server.log_path is None  # the temporary log it made is gone; the error above carried its tail


@pytest.mark.parametrize("mode", ["never", "slow"])
def test_readiness_poll_is_bounded_and_kills(launcher, mode):
    module, env = launcher
    server = e2e.Server(
        "/m", ["--mode", mode], launcher=module, env=env, ready_timeout=3, poll_interval=0.1, stop_grace=2
    )
    start = time.monotonic()
    with pytest.raises(e2e.ServerError, match="not ready after 3s"):
        server.__enter__()
    assert time.monotonic() - start < 15
    assert server.process is None


def test_http_error_names_url_and_body():
    port = e2e.free_port()  # nothing listens there
    with pytest.raises(e2e.HTTPRequestError, match=f"127.0.0.1:{port}/generate"):
        e2e.generate(f"http://127.0.0.1:{port}", "hi", 1, timeout=2)


def test_compare_outputs_verdicts():
    v = e2e.compare_outputs([[1, 2, 3], [1, 2, 3], [1, 2], [5]], [[1, 2, 3], [1, 9, 3], [1, 2, 4], [5]])
    assert [(x.identical, x.first_mismatch) for x in v] == [(True, None), (False, 1), (False, 2), (True, None)]
    g = e2e.Generation(prompt="p", output_ids=[7, 8], text="", meta_info={})
    assert e2e.compare_outputs([g], [[7, 8]])[0].identical
    with pytest.raises(ValueError, match="2 plain outputs but 1"):
        e2e.compare_outputs([[1], [2]], [[1]])


def test_spec_summary_reads_flat_and_nested_layouts():
    flat = {"speculative_algorithm": None, "disable_cuda_graph": True, "internal_states": [{}]}
    s = e2e.spec_summary(flat)
    assert s.speculative_algorithm is None and s.avg_spec_accept_length is None and not s.cuda_graph_on
    nested = {
        "speculative": {"speculative_algorithm": "DFLASH", "speculative_num_draft_tokens": "8"},
        "cuda_graph": {"disable_cuda_graph": False},
        "internal_states": [{"avg_spec_accept_length": 3}],
    }
    s = e2e.spec_summary(nested)
    assert (s.speculative_algorithm, s.speculative_num_draft_tokens, s.avg_spec_accept_length) == ("DFLASH", 8, 3.0)
    assert json.dumps(s.as_dict())


def test_local_weights_needs_config_and_every_shard(tmp_path, monkeypatch):
    (tmp_path / "config.json").write_text("{}")
    assert e2e.local_weights(str(tmp_path)) is None  # no weights at all
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(b"")
    assert e2e.local_weights(str(tmp_path)) is None  # one shard missing
    (tmp_path / "model-00002-of-00002.safetensors").write_bytes(b"")
    assert e2e.local_weights(str(tmp_path)) == str(tmp_path)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    assert e2e.local_weights("nobody/no-such-model") is None  # cache lookup only, no network


def test_skip_reason_names_gpus_then_missing_weights(tmp_path, monkeypatch):
    monkeypatch.setattr(e2e, "cuda_device_count", lambda: 1)
    assert e2e.skip_reason(2, {}) == "needs 2 CUDA GPU(s), found 1"
    reason = e2e.skip_reason(1, {"MY_TARGET": str(tmp_path / "nothing")})
    assert "MY_TARGET=" in reason and "set these env vars" in reason
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"")
    assert e2e.skip_reason(1, {"MY_TARGET": str(tmp_path)}) is None


def test_square_png_is_a_valid_png():
    import struct
    import zlib

    png = e2e.square_png(size=8, square=4, color=(1, 2, 3))
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert (width, height) == (8, 8)
    idat_len = struct.unpack(">I", png[33:37])[0]
    raw = zlib.decompress(png[41 : 41 + idat_len])
    row = raw[4 * 25 : 5 * 25]  # filter byte + 8 RGB pixels; row 4 crosses the square (x 2..5)
    assert row[0] == 0 and row[1 + 3 * 2 : 1 + 3 * 3] == bytes((1, 2, 3)) and row[1:4] == b"\xff\xff\xff"
    message = e2e.image_message("what?", png)
    assert message["content"][0]["image_url"]["url"].startswith("data:image/png;base64,")


def test_token_prompts_are_deterministic_and_in_range():
    a = e2e.token_prompts(50, [3, 70], seed=5)
    assert a == e2e.token_prompts(50, [3, 70], seed=5) and [len(p) for p in a] == [3, 70]
    assert all(2 <= t < 50 for p in a for t in p)
    assert a != e2e.token_prompts(50, [3, 70], seed=6)


SIGTERMED_SCRIPT = textwrap.dedent("""
    import sys, time
    from sglang_gemma4_dflash_testkit import e2e
    e2e.stop_servers_on_sigterm()
    server = e2e.Server("/m", ["--mode", "ok", "--child-pid-file", sys.argv[2]], launcher=sys.argv[1],
                        ready_timeout=30, poll_interval=0.1).__enter__()
    print(server.process.pid, flush=True)
    time.sleep(600)
""")


def test_sigterm_stops_the_servers_a_script_started(launcher, tmp_path):
    module, env = launcher
    pid_file = tmp_path / "child.pid"
    script = subprocess.Popen(
        [sys.executable, "-c", SIGTERMED_SCRIPT, module, str(pid_file)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )
    pgid = int(script.stdout.readline())
    child = int(pid_file.read_text())
    assert e2e.group_alive(pgid)
    script.terminate()  # what `timeout` sends
    assert script.wait(timeout=30) == 143
    deadline = time.monotonic() + 10  # the killed child is reaped by init, not at once
    while e2e.group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not e2e.group_alive(pgid), "the server's group outlived the SIGTERMed script"
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)


PARSE_SERVER_ARGS = """
import argparse, json, sys
from sglang.srt.server_args import ServerArgs
from sglang_gemma4_dflash_testkit import e2e
parser = argparse.ArgumentParser()
ServerArgs.add_cli_args(parser)
for piecewise in (True, False):
    args = ["--model-path", "m"] + e2e.gpu_server_args(8, piecewise=piecewise) + e2e.dflash_args("d", 8, "triton")
    ns = vars(parser.parse_args(args))
    print(json.dumps({k: ns.get(k) for k in ("cuda_graph_max_bs", "cuda_graph_max_bs_decode", "max_running_requests")}))
"""


def test_gpu_server_args_parse_on_the_installed_line_and_on_0513(sglang_0513):
    """The GPU scripts' flags are the line's own: 0.5.23 rejects 0.5.17's `--cuda-graph-max-bs` as ambiguous (the
    first 0.5.23 GPU probe stopped there) and has no `--disable-piecewise-cuda-graph`."""
    python_0513, env_0513 = sglang_0513
    for python, env in ((sys.executable, {}), (python_0513, env_0513)):
        run = subprocess.run(
            [python, "-c", PARSE_SERVER_ARGS], capture_output=True, text=True, timeout=300, env={**os.environ, **env}
        )
        assert run.returncode == 0, run.stderr[-2000:]
        for line in run.stdout.splitlines()[-2:]:
            parsed = json.loads(line)
            assert parsed["max_running_requests"] == 8
            assert 8 in (parsed["cuda_graph_max_bs"], parsed["cuda_graph_max_bs_decode"]), parsed
