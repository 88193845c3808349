"""The one adapter between this plugin and the SGLang line that is installed: no other module imports SGLang.

Everything that differs between SGLang lines is answered here by looking at the installed package (modules,
classes, methods, the source of two methods), never by a version table:

- ``symbols``: where SGLang keeps what the plugin reaches, and imports of it that never raise;
- ``probe``: what the installed line offers (DFlash workers, Gemma 4 targets, capture, graph sampler, the DFlash2
  candidate step) and whether a hook target takes what its hook binds;
- ``registry``: SGLang's private ``HookRegistry`` API, alone;
- ``runtime``: lookups while serving (the draft's config, the TP and DP groups, graph batch sizes, class checks).
"""
