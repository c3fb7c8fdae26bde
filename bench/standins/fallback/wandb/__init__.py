"""A no-op ``wandb`` for bench runs without the real one (see ../../sitecustomize.py).

Only on sys.path, last, when DDPIFY_BENCH_STANDINS=1: ``wandb.init(...)`` returns a run whose
``config``, ``summary``, ``log``, ``watch``, ``finish`` ... accept anything and do nothing;
``wandb.Image``, ``wandb.Histogram``, ``wandb.Table`` ... are inert objects.
"""

from __future__ import annotations

from typing import Any


class _Inert:
    """Accepts any call, attribute, item or update and does nothing."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> _Inert:
        return _Inert()

    def __getattr__(self, name: str) -> _Inert:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Inert()

    def __setattr__(self, name: str, value: Any) -> None:
        pass

    def __getitem__(self, key: Any) -> _Inert:
        return _Inert()

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def __enter__(self) -> _Inert:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


Image = Histogram = Table = Video = Audio = Object3D = Html = Artifact = Settings = _Inert
config = _Inert()
summary = _Inert()
run = None


def init(*args: Any, **kwargs: Any) -> _Inert:
    return _Inert()


def log(*args: Any, **kwargs: Any) -> None:
    return None


def watch(*args: Any, **kwargs: Any) -> None:
    return None


def finish(*args: Any, **kwargs: Any) -> None:
    return None


def login(*args: Any, **kwargs: Any) -> bool:
    return True


def save(*args: Any, **kwargs: Any) -> None:
    return None


def define_metric(*args: Any, **kwargs: Any) -> _Inert:
    return _Inert()
