"""`sglang-gemma4-dflash bench`: throughput, accept length, speedup and greedy parity of a DFLASH server against a
plain server of the same target, measured the way the DFlash authors' benchmark measures a server.

    sglang-gemma4-dflash bench --url http://dflash:30000 --baseline-url http://plain:30001 --dataset gsm8k
    sglang-gemma4-dflash bench --launch google/gemma-4-31B-it --draft z-lab/gemma-4-31B-it-DFlash --tp 2 \\
        --dataset gsm8k math500 --concurrency 1 8 32 --parity 16 --out r.json --plot r.png -- --mem-fraction-static 0.8

Exit code: 0 done, 1 done but parity found a difference, 2 bad input or a server failure (one message on stderr;
what finished is still in --out).
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import Optional

from sglang_gemma4_dflash.bench import client, data, launcher, measure, parity, report, template
from sglang_gemma4_dflash.bench.errors import BenchError

PROG = "sglang-gemma4-dflash bench"
ARMS = ("baseline", "dflash")  # measured in this order


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description=__doc__.split("\n\n")[0],
        epilog="Arguments after `--` go to both launched servers.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    servers = p.add_argument_group("servers (--url, or --launch)")
    servers.add_argument("--url", help="a running DFLASH server")
    servers.add_argument("--baseline-url", help="a running plain server of the same target (gives the speedup)")
    servers.add_argument("--launch", metavar="TARGET", help="start a plain, then a DFLASH server of TARGET here")
    servers.add_argument("--draft", help="the DFlash draft for --launch")
    servers.add_argument("--tp", type=int, default=1, help="tensor parallel size for --launch (default 1)")
    servers.add_argument(
        "--dflash-args", default="", help='more arguments for the launched DFLASH server only, one string ("--a 1 --b")'
    )
    servers.add_argument("--launcher", default=launcher.DEFAULT_LAUNCHER, help="module run by --launch")
    servers.add_argument("--ready-timeout", type=float, default=1800.0, help="seconds a launched server may take")
    servers.add_argument("--log-dir", help="launched servers' logs (default: next to --out)")
    servers.add_argument(
        "--expect-algorithm",
        default="DFLASH",
        help="speculative algorithm the --url server must run: DFLASH (default), none (plain), or any",
    )
    work = p.add_argument_group("workload")
    work.add_argument(
        "--dataset", nargs="+", default=["gsm8k"], help=f"{' | '.join(data.HUB)} | PATH.jsonl (several allowed)"
    )
    work.add_argument("--num-prompts", type=int, default=128, help="timed prompts per dataset and concurrency")
    work.add_argument("--concurrency", nargs="+", default=["1"], help="requests in flight: one value or a sweep")
    work.add_argument("--max-new-tokens", type=int, default=2048)
    work.add_argument("--enable-thinking", action="store_true", help="passed to the chat template")
    work.add_argument("--tokenizer", help="tokenizer for the chat template (default: the server's model path)")
    work.add_argument("--parity", type=int, default=0, metavar="N", help="N prompts: token identity of both servers")
    work.add_argument("--seed", type=int, default=42, help="prompt order (the authors' 42)")
    work.add_argument("--timeout", type=float, default=3600.0, help="seconds one request may take")
    out = p.add_argument_group("output")
    out.add_argument("--out", default="bench_result.json", help="result JSON (default bench_result.json)")
    out.add_argument("--plot", help="PNG with speedup and accept length")
    out.add_argument("--no-progress", action="store_true", help="no tqdm progress bars")
    out.add_argument("--replot", metavar="JSON", help="only draw --plot from an earlier result JSON")
    return p


def parse(argv: Optional[list[str]]) -> tuple[argparse.Namespace, list[str]]:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.replot:
        if not args.plot:
            parser.error("--replot needs --plot")
        return args, extra
    try:
        args.concurrency = sorted({int(c) for v in args.concurrency for c in str(v).split(",") if c})
    except ValueError:
        parser.error(f"--concurrency: integers expected, got {' '.join(map(str, args.concurrency))}")
    if not args.concurrency or min(args.concurrency) < 1:
        parser.error("--concurrency: values must be >= 1")
    if bool(args.url) == bool(args.launch):
        parser.error("give either --url (a running DFLASH server) or --launch TARGET --draft DRAFT")
    if args.launch and not args.draft:
        parser.error("--launch needs --draft (the DFlash draft checkpoint)")
    if args.launch and args.baseline_url:
        parser.error("--baseline-url is for --url; --launch starts its own baseline")
    if extra and not args.launch:
        parser.error("arguments after `--` are server arguments: only with --launch")
    if args.num_prompts < 0 or args.parity < 0 or args.max_new_tokens < 1:
        parser.error("--num-prompts and --parity must be >= 0, --max-new-tokens >= 1")
    if args.num_prompts == 0 and args.parity == 0:
        parser.error("nothing to do: --num-prompts 0 and no --parity")
    return args, extra


# ------------------------------------------------------------------------------------------------------- servers


def server_entry(url: str, flag: str) -> dict:
    """Model and server info of a running server (the `servers` entry of the result)."""
    try:
        model = client.model_info(url)
        info = client.server_info(url)
    except client.HTTPRequestError as e:
        raise BenchError(f"{flag} {url}: {e}; start the server first, or use --launch") from None
    spec = client.spec_summary(info)
    return {"url": url, "model_path": model.get("model_path"), "tokenizer_path": model.get("tokenizer_path"),
            "spec": spec.as_dict(), "server_info": info}  # fmt: skip


def require_algorithm(entry: dict, flag: str, expect: str) -> None:
    """BenchError unless the server runs `expect` (DFLASH, ...; "none": plain; "any": anything)."""
    running, url = entry["spec"]["speculative_algorithm"], entry["url"]
    wanted = expect.lower()
    if wanted == "none" and running:
        raise BenchError(f"{flag} {url} runs speculative_algorithm={running}; a plain server is expected there")
    if wanted not in ("none", "any") and str(running).lower() != wanted:
        raise BenchError(
            f"{flag} {url} runs speculative_algorithm={running}, not {expect}: start it with "
            f"--speculative-algorithm {expect} --speculative-draft-model-path DRAFT "
            "(or pass --expect-algorithm none/any to measure it as it is)"
        )


def startup_failure(error: str) -> str:
    """The first line of a ServerError plus the last exception line of the log tail it carries."""
    lines = error.splitlines()
    raised = [line.strip() for line in lines[1:] if re.match(r"^\s*[\w.]+(Error|Exception): ", line)]
    return lines[0] + (f" ({raised[-1][:300]})" if raised else "")


def launch_args(arm: str, args: argparse.Namespace, extra: list[str]) -> list[str]:
    out = ["--tp-size", str(args.tp)] if args.tp != 1 else []
    if arm == "dflash":
        out += ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", args.draft]
        out += shlex.split(args.dflash_args)
    return out + extra


# ------------------------------------------------------------------------------------------------------ the run


class Run:
    """The state of one bench command: the result dict (written after every step) and the encoded prompts."""

    def __init__(self, args: argparse.Namespace, extra: list[str], argv: list[str]):
        self.args, self.extra = args, extra
        self.result: dict = {
            "command": [PROG, *argv],
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "status": "running",
            "method": {
                "sampling": {**client.GREEDY, "max_new_tokens": args.max_new_tokens},
                "chat_template": "client side (transformers tokenizer), one user turn",
                "enable_thinking": args.enable_thinking,
                "warmup": f"one batch of `concurrency` requests, max_new_tokens={measure.WARMUP_MAX_NEW_TOKENS}",
                "flush_cache": "before every measurement",
                "throughput": "sum of completion tokens / wall time",
                "accept_length": "mean of meta_info.spec_accept_length over requests",
                "num_prompts": args.num_prompts,
                "concurrency": args.concurrency,
                "datasets": args.dataset,
                "seed": args.seed,
            },
            "environment": {"hardware": report.hardware(), "versions": report.versions()},
            "servers": {},
            "runs": [],
            "summary": [],
        }
        self.prompts: dict[str, list[list[int]]] = {}  # dataset label -> token ids (measured + warm-up pool)
        self.parity_prompts: list[list[int]] = []
        self.parity_outputs: dict[str, list[list[int]]] = {}

    def save(self) -> None:
        report.write_json(self.args.out, self.result)

    def log(self, msg: str) -> None:
        print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    def prepare(self, tokenizer_path: str) -> None:
        """Load every dataset, apply the chat template on the client; fails before any measurement."""
        texts = {}
        for name in self.args.dataset:
            label = data.dataset_label(name)
            texts[label] = data.load_prompts(name)
            self.log(f"dataset {label}: {len(texts[label])} prompts")
        tokenizer = template.load_tokenizer(tokenizer_path)
        self.result["method"]["tokenizer"] = tokenizer_path
        pool = self.args.num_prompts + max(self.args.concurrency)
        for label, prompts in texts.items():
            chosen = data.select(prompts, pool, self.args.seed) if self.args.num_prompts else []
            self.prompts[label] = [template.chat_ids(tokenizer, t, self.args.enable_thinking) for t in chosen]
        if self.args.parity:
            first = next(iter(texts.values()))
            chosen = data.select(first, self.args.parity, self.args.seed)
            self.parity_prompts = [template.chat_ids(tokenizer, t, self.args.enable_thinking) for t in chosen]

    def measure_arm(self, arm: str, url: str) -> None:
        n = self.args.num_prompts
        for label, ids in self.prompts.items() if n else ():
            for c in self.args.concurrency:
                self.log(f"{arm}: {label}, concurrency {c}, {n} prompts")
                progress = None if self.args.no_progress else f"{arm} {label} c={c}"
                warmup = ids[n : n + c]
                m = measure.measure(url, ids[:n], warmup, self.args.max_new_tokens, c, self.args.timeout, progress)
                self.result["runs"].append({"arm": arm, "dataset": label, "concurrency": c, **m})
                self.result["summary"] = summary_rows(self.result["runs"])
                self.save()
        if self.parity_prompts:
            self.log(f"{arm}: parity, {len(self.parity_prompts)} prompts one at a time")
            self.parity_outputs[arm] = parity.outputs(
                url, self.parity_prompts, self.args.max_new_tokens, self.args.timeout
            )
        after = client.spec_summary(client.server_info(url))
        self.result["servers"][arm]["spec_after"] = after.as_dict()
        self.save()

    def run_urls(self) -> None:
        a = self.args
        urls = {"dflash": a.url.rstrip("/")}
        if a.baseline_url:
            urls["baseline"] = a.baseline_url.rstrip("/")
        checks = {"dflash": ("--url", a.expect_algorithm), "baseline": ("--baseline-url", "none")}
        for arm, url in urls.items():
            flag, expect = checks[arm]
            self.result["servers"][arm] = server_entry(url, flag)
            self.save()
            require_algorithm(self.result["servers"][arm], flag, expect)
        dflash = self.result["servers"]["dflash"]
        self.prepare(a.tokenizer or dflash["tokenizer_path"] or dflash["model_path"])
        for arm in ARMS:
            if arm in urls:
                self.measure_arm(arm, urls[arm])

    def run_launch(self) -> None:
        a = self.args
        self.prepare(a.tokenizer or a.launch)
        log_dir = Path(a.log_dir) if a.log_dir else Path(a.out or ".").resolve().parent / "bench_logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        for arm in ARMS:
            log_path = str(log_dir / f"{arm}.log")
            server = launcher.Server(
                a.launch, launch_args(arm, a, self.extra), launcher=a.launcher, ready_timeout=a.ready_timeout,
                log_path=log_path,
            )  # fmt: skip
            self.result["servers"][arm] = {"launch": server.command(), "log": log_path}
            self.save()
            self.log(f"{arm}: starting {' '.join(server.command()[2:])} (log {log_path})")
            try:
                server.__enter__()
            except launcher.ServerError as e:
                raise BenchError(
                    f"the {arm} server did not start: {startup_failure(str(e))}; see its log {log_path}"
                ) from None
            try:
                expect = "none" if arm == "baseline" else "DFLASH"
                flag = f"--launch ({arm})"
                self.result["servers"][arm].update(server_entry(server.base_url, flag))
                require_algorithm(self.result["servers"][arm], flag, expect)
                self.measure_arm(arm, server.base_url)
            finally:
                server.stop()

    def finish_parity(self) -> int:
        if len(self.parity_outputs) < 2:
            if self.parity_prompts:
                self.log("parity skipped: it needs a baseline server")
            return 0
        verdict = parity.compare(self.parity_outputs["baseline"], self.parity_outputs["dflash"])
        self.result["parity"] = verdict
        diffs = [
            f"prompt {p['index']} at token {p['first_difference']}" for p in verdict["prompts"] if not p["identical"]
        ]
        print(f"parity: {verdict['identical']}/{verdict['num_prompts']} prompts token-identical"
              + (f"; first differences: {', '.join(diffs)}" if diffs else ""))  # fmt: skip
        return 0 if verdict["all_identical"] else 1


def summary_rows(runs: list[dict]) -> list[dict]:
    """One row per (dataset, concurrency): the DFLASH arm's numbers and, where measured, the speedup."""
    by_key: dict = {}
    for r in runs:
        by_key.setdefault((r["dataset"], r["concurrency"]), {})[r["arm"]] = r
    rows = []
    for (label, c), arms in by_key.items():
        d, b = arms.get("dflash"), arms.get("baseline")
        tps, base = (d or {}).get("throughput_tok_s"), (b or {}).get("throughput_tok_s")
        rows.append({
            "dataset": label, "concurrency": c, "throughput_tok_s": tps, "baseline_throughput_tok_s": base,
            "speedup": tps / base if tps and base else None,
            "accept_length": (d or {}).get("accept_length"),
            "latency_p50_s": (d or {}).get("latency_s", {}).get("p50"),
            "latency_p90_s": (d or {}).get("latency_s", {}).get("p90"),
        })  # fmt: skip
    return rows


def print_summary(rows: list[dict]) -> None:
    def f(v, fmt="{:.2f}"):
        return "-" if v is None else fmt.format(v)

    print(f"{'dataset':<14}{'conc':>5}{'base tok/s':>12}{'dflash tok/s':>14}{'speedup':>9}{'accept':>8}"
          f"{'p50 s':>8}{'p90 s':>8}")  # fmt: skip
    for r in rows:
        print(f"{r['dataset']:<14}{r['concurrency']:>5}{f(r['baseline_throughput_tok_s'], '{:.1f}'):>12}"
              f"{f(r['throughput_tok_s'], '{:.1f}'):>14}{f(r['speedup']):>9}{f(r['accept_length']):>8}"
              f"{f(r['latency_p50_s']):>8}{f(r['latency_p90_s']):>8}")  # fmt: skip


def replot(json_path: str, png_path: str) -> int:
    try:
        result = json.loads(Path(json_path).read_text())
        report.plot(png_path, result)
    except (OSError, ValueError, BenchError) as e:
        print(f"{PROG}: error: --replot {json_path}: {e}", file=sys.stderr)
        return 2
    print(f"plot: {png_path}")
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    raw = list(sys.argv[1:] if argv is None else argv)
    args, extra = parse(raw)
    if args.replot:
        return replot(args.replot, args.plot)
    run = Run(args, extra, raw)
    code = 0
    before = launcher.stop_servers_on_sigterm() if args.launch else None
    try:
        run.run_launch() if args.launch else run.run_urls()
        code = run.finish_parity()
        run.result["status"] = "parity_difference" if code else "ok"
    except BenchError as e:
        code = 2
        run.result.update(status="error", error=str(e))
        print(f"{PROG}: error: {e}", file=sys.stderr)
    except KeyboardInterrupt:
        code = 130
        run.result.update(status="interrupted", error="interrupted")
        print(f"{PROG}: interrupted", file=sys.stderr)
    finally:
        if args.launch:  # None: the handler before was not set from Python
            signal.signal(signal.SIGTERM, signal.SIG_DFL if before is None else before)
    run.result["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    run.save()
    if run.result["summary"]:
        print_summary(run.result["summary"])
        if args.plot:
            try:
                report.plot(args.plot, run.result)
            except BenchError as e:
                print(f"{PROG}: error: {e}", file=sys.stderr)
                code = code or 2
    elif args.plot:
        print(f"{PROG}: no measurement finished: no plot written", file=sys.stderr)
    if args.out:
        print(f"results: {args.out}" + (f", plot: {args.plot}" if args.plot and run.result["summary"] else ""))
    return code


if __name__ == "__main__":
    sys.exit(main())
