"""SGLang release numbers and image tags (no data: :mod:`.catalog` knows which releases exist)."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["SGLangVersion", "SGLangVersionError", "parse_image_tag", "parse_version"]


class SGLangVersionError(ValueError):
    """A version string or image tag that cannot be parsed, or a release the operator does not support."""


@dataclass(frozen=True, order=True)
class SGLangVersion:
    """An SGLang release number, e.g. ``0.5.10`` or ``0.5.10.post1`` (compares numerically)."""

    major: int
    minor: int
    patch: int
    post: int = 0

    def __str__(self) -> str:
        base = f"{self.major}.{self.minor}.{self.patch}"
        return f"{base}.post{self.post}" if self.post else base

    @property
    def base(self) -> SGLangVersion:
        """The release without its post number (``0.5.3.post2`` → ``0.5.3``)."""
        return SGLangVersion(self.major, self.minor, self.patch)


_VERSION_RE = re.compile(r"v?(\d+)\.(\d+)\.(\d+)(?:\.post(\d+))?")


def parse_version(text: str) -> SGLangVersion:
    """``"0.5.10"``, ``"v0.5.10"``, ``"0.5.10.post1"`` → :class:`SGLangVersion`.

    Raises :class:`SGLangVersionError` for anything else.
    """
    m = _VERSION_RE.fullmatch(text.strip())
    if not m:
        raise SGLangVersionError(f"not an SGLang version: {text!r}")
    return SGLangVersion(int(m[1]), int(m[2]), int(m[3]), int(m[4] or 0))


def parse_image_tag(image: str) -> SGLangVersion:
    """The SGLang version in an image reference, e.g. ``lmsysorg/sglang:v0.5.10-cu129`` → 0.5.10.

    Accepts ``v0.5.10``, ``v0.5.10.post1-cu129``, ``0.5.23-cu130-runtime`` and a ``@sha256:`` suffix.
    Raises :class:`SGLangVersionError` when the tag holds no version (``latest``, ``dev``, no tag):
    the spec must then name ``sglang.version`` explicitly.
    """
    ref = image.split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    if ":" not in last:
        raise SGLangVersionError(f"image {image!r} has no tag; set the SGLang version explicitly")
    tag = last.split(":", 1)[1]
    m = re.match(r"v?(\d+\.\d+\.\d+(?:\.post\d+)?)(?:$|[-_+])", tag)
    if not m:
        raise SGLangVersionError(f"image tag {tag!r} holds no SGLang version; set the SGLang version explicitly")
    return parse_version(m[1])
