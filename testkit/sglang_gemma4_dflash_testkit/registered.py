"""The base of the registered large-model tests (test/registered/spec/test_gemma4_dflash_*_extra.py), written the
way SGLang writes its own: a class launches one DFLASH server in ``setUpClass`` with SGLang's ``popen_launch_server``
and kills it in ``tearDownClass``; the checks are test methods; a concrete test sets the models and thresholds as
class attributes.

- ``DFlashServerBase``: the server (target, draft, TP 2, block 16, flashinfer draft attention) and the start-up check;
- ``GSM8KUnderDFlash``: SGLang's GSM8K eval (``run_eval``) and the accept length the scheduler reports;
- ``ImageChatUnderDFlash``: an image + text chat request, then a text request that must still accept drafts.

A test skips (``unittest.SkipTest`` from ``setUpClass``, with the reason) without enough CUDA GPUs or without the
weights on local disk (directories and the Hugging Face cache only, never the network; each model's environment
variable, ``target_env`` / ``draft_env``, points at a local copy); ``GSM8K_DATA_PATH`` names a local GSM8K test.jsonl
(otherwise SGLang's eval runner downloads it). ``register_cuda_ci`` is SGLang's CI marker, a no-op where SGLang's
CI module does not import (SGLang's CI reads each test file's call to it, not its run). SGLang's test kit (``sglang.test.test_utils``, ``sglang.test.run_eval``) is used on every
line that imports it (0.5.13 and 0.5.23 both ship it); where it does not import (a CPU venv without SGLang's
benchmark dependencies, e.g. ``datasets``) the classes fall back to ``unittest.TestCase`` so that they still collect
and skip, and a machine that could run them fails with the import error instead.
"""

from __future__ import annotations

import os
import unittest
from types import SimpleNamespace

from sglang_gemma4_dflash_testkit import e2e

try:
    from sglang.test.ci.ci_register import register_cuda_ci
except ImportError:  # SGLang not importable: the marker is a no-op at run time anyway

    def register_cuda_ci(*args, **kwargs):
        return None


try:
    from sglang.srt.utils import kill_process_tree
    from sglang.test.run_eval import run_eval
    from sglang.test.test_utils import (
        DEFAULT_TIMEOUT_FOR_SERVER_LAUNCH,
        DEFAULT_URL_FOR_TEST,
        CustomTestCase,
        popen_launch_server,
    )
except ImportError as error:
    CustomTestCase = unittest.TestCase
    SGLANG_TEST_KIT_ERROR = f"SGLang's test kit does not import here ({type(error).__name__}: {error})"
else:
    SGLANG_TEST_KIT_ERROR = None


class DFlashServerBase(CustomTestCase):
    """One DFLASH server per class. Subclasses set the ``(env var, default)`` of each model."""

    target_env: tuple[str, str]
    draft_env: tuple[str, str]
    tp_size = 2
    num_draft_tokens = 16
    draft_attention_backend = "flashinfer"
    max_running_requests = 32
    process = None

    @classmethod
    def model_paths(cls) -> dict[str, str]:
        """``{env var: path or hub id}`` of the target and the draft, as the environment sets them now."""
        return {name: os.environ.get(name, default) for name, default in (cls.target_env, cls.draft_env)}

    @classmethod
    def setUpClass(cls):
        reason = e2e.skip_reason(cls.tp_size, cls.model_paths())
        if reason is not None:
            raise unittest.SkipTest(f"{cls.__name__}: {reason}")
        if SGLANG_TEST_KIT_ERROR is not None:
            raise RuntimeError(f"{cls.__name__} can run on this machine, but {SGLANG_TEST_KIT_ERROR}")
        target_name, draft_name = cls.target_env[0], cls.draft_env[0]
        cls.target = e2e.local_weights(cls.model_paths()[target_name])
        draft = e2e.local_weights(cls.model_paths()[draft_name])
        cls.base_url = DEFAULT_URL_FOR_TEST
        args = e2e.dflash_server_args(
            draft,
            num_draft_tokens=cls.num_draft_tokens,
            draft_attention_backend=cls.draft_attention_backend,
            tp_size=cls.tp_size,
            max_running_requests=cls.max_running_requests,
        )
        cls.process = popen_launch_server(
            cls.target,
            cls.base_url,
            timeout=3 * DEFAULT_TIMEOUT_FOR_SERVER_LAUNCH,
            other_args=args,
            env={"HF_HUB_OFFLINE": "1"},
        )
        cls.started = e2e.spec_summary(e2e.server_info(cls.base_url))
        print(f"[{cls.__name__}] started: {cls.started.as_dict()}")

    @classmethod
    def tearDownClass(cls):
        if cls.process is not None:
            kill_process_tree(cls.process.pid)
            cls.process = None

    def test_started_with_dflash(self):
        self.assertEqual(self.started.speculative_algorithm, "DFLASH")
        self.assertEqual(self.started.speculative_draft_attention_backend, self.draft_attention_backend)
        self.assertEqual(self.started.speculative_num_draft_tokens, self.num_draft_tokens)


class GSM8KUnderDFlash(DFlashServerBase):
    """GSM8K (5-shot, completion API, 512 new tokens) scores at least ``min_gsm8k_score`` and the scheduler's
    average accept length afterwards is at least ``min_accept_length``; CUDA graphs are on."""

    gsm8k_questions = 200
    min_gsm8k_score: float
    min_accept_length: float

    def test_cuda_graph_on(self):
        self.assertTrue(self.started.cuda_graph_on, "CUDA graphs are off")

    def test_gsm8k_accuracy_and_accept_length(self):
        metrics = run_eval(
            SimpleNamespace(
                base_url=self.base_url,
                model=self.target,
                eval_name="gsm8k",
                api="completion",
                max_tokens=512,
                num_examples=self.gsm8k_questions,
                num_threads=64,
                num_shots=5,
                gsm8k_data_path=os.environ.get("GSM8K_DATA_PATH"),
            )
        )
        finished = e2e.spec_summary(e2e.server_info(self.base_url))
        print(
            f"[{type(self).__name__}] gsm8k={metrics['score']:.4f} "
            f"avg_spec_accept_length={finished.avg_spec_accept_length}"
        )
        self.assertGreaterEqual(float(metrics["score"]), self.min_gsm8k_score)
        self.assertIsNotNone(finished.avg_spec_accept_length, "the server reported no accept length")
        self.assertGreaterEqual(finished.avg_spec_accept_length, self.min_accept_length)


class ImageChatUnderDFlash(DFlashServerBase):
    """A chat request with a PNG made here (a red square on white) completes and names the colour; the scheduler
    reports an accept length afterwards, and a text request right after still accepts drafted tokens."""

    max_running_requests = 8
    question = "What colour is the square in this image? Answer with one word."
    expected_word = "red"
    text_prompt = "Count from 1 to 40, separated by commas:"

    def test_image_chat_then_text(self):
        message = e2e.image_message(self.question, e2e.square_png())
        answer = e2e.chat(self.base_url, self.target, [message], max_tokens=32)
        after_image = e2e.spec_summary(e2e.server_info(self.base_url))
        text = e2e.generate(self.base_url, self.text_prompt, max_new_tokens=128)

        choice = answer["choices"][0]
        content = choice["message"]["content"] or ""
        print(
            f"[{type(self).__name__}] answer={content!r} finish={choice.get('finish_reason')} "
            f"avg_spec_accept_length={after_image.avg_spec_accept_length} "
            f"text spec_accept_length={text.meta_info.get('spec_accept_length')}"
        )
        self.assertIn(choice.get("finish_reason"), ("stop", "length"))
        self.assertIn(self.expected_word, content.lower())
        self.assertIsNotNone(after_image.avg_spec_accept_length, "no accept length reported after the image")
        self.assertGreaterEqual(after_image.avg_spec_accept_length, 1.0)
        self.assertGreater(
            float(text.meta_info.get("spec_accept_length") or 0.0),
            1.0,
            "DFLASH accepted no drafted token on text after the image request",
        )
