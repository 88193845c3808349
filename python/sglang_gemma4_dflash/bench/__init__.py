"""`sglang-gemma4-dflash bench`: accept length, speedup and greedy parity of live SGLang servers.

Modules: `errors` (the one error type users see), `client` (HTTP to a server), `launcher` (start/stop a server in
its own process group), `data` (prompts: named datasets or JSONL), `template` (client-side chat template),
`measure` (one timed arm), `parity` (token identity), `report` (environment, JSON, PNG), `main` (the command).
"""
