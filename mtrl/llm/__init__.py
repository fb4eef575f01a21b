"""Language-model policies for ``mtrl env try``: any causal LM (Hugging Face) or OpenAI-compatible endpoint.

Everything here drives an environment through its contract alone (``reset``/``step``/``result``), so it works for
every environment, built-in or made from ``custom-environments/template``, with no per-environment agent code. It
needs the optional ``mtrl[llm]`` extra (torch, transformers, trl, peft, openai; locked in requirements/llm.txt);
the modules import those libraries lazily so the rest of ``mtrl`` (Lambda handlers, workers) never does.
"""

from __future__ import annotations


class LLMUnavailableError(RuntimeError):
    """The ``mtrl[llm]`` extra is not installed (or a library in it failed to import)."""


def require(module: str) -> None:
    """Import ``module`` or raise ``LLMUnavailableError`` saying how to install the extra."""
    import importlib

    try:
        importlib.import_module(module)
    except ImportError as error:
        raise LLMUnavailableError(
            f"the language-model policy needs the optional extra: pip install -e '.[llm]' "
            f"(or -r requirements/llm.txt) — {error}"
        ) from error
