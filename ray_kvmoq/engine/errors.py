"""Engine errors: every failure a caller can act on has its own class and a message naming it.

```
EngineError (Exception)
├── ModelLoadError              a checkpoint or cache cannot be read
│   └── UnsupportedModelError   the checkpoint's architecture or RoPE type is not implemented
└── InvalidRequestError (also ValueError)
    ├── PromptTooLongError      prompt (+ max_tokens) exceeds the model's context length
    ├── EmptyPromptError        no tokens to run
    └── InvalidSamplingParamsError
```
"""

from __future__ import annotations

__all__ = [
    "EmptyPromptError",
    "EngineError",
    "InvalidRequestError",
    "InvalidSamplingParamsError",
    "ModelLoadError",
    "PromptTooLongError",
    "UnsupportedModelError",
]


class EngineError(Exception):
    """Base class of every error raised by ``ray_kvmoq.engine``."""


class ModelLoadError(EngineError):
    """A checkpoint, GGUF file or cache entry could not be read."""


class UnsupportedModelError(ModelLoadError):
    """The checkpoint describes an architecture (or RoPE variant) this engine does not run."""


class InvalidRequestError(EngineError, ValueError):
    """A request (tokens, KV, sampling parameters) is malformed; the message says which part."""


class PromptTooLongError(InvalidRequestError):
    """The prompt, plus the tokens to generate, does not fit the model's context length."""


class EmptyPromptError(InvalidRequestError):
    """The prompt has no tokens."""


class InvalidSamplingParamsError(InvalidRequestError):
    """A sampling parameter is out of range."""
