"""What a request costs an endpoint's tokens-per-minute budget, counted as the endpoint counts it.

Hosted endpoints charge a request **when it arrives**, before any token is generated, so the
reply's ``usage`` comes too late and too low to pace by:

- ``prompt_plus_max`` (Azure OpenAI; Cerebras and most OpenAI-compatible gateways): the prompt's
  tokens plus ``max_tokens`` (or ``max_completion_tokens``) times ``n``;
- ``max_of`` (OpenAI's rate-limit guide): the larger of ``max_tokens`` × ``n`` and an estimate
  from the request's characters;
- ``usage``: what the reply's ``usage`` says (the prompt on arrival, the completion after; what
  self-hosted servers that count tokens at all do).

A connection names its rule as ``token_charge``; unset, it is ``max_of`` for the public OpenAI
API and ``prompt_plus_max`` for everything else (:func:`default_rule`). A request without an
output cap is charged as ``usage`` whatever the rule (no endpoint can reserve an unknown cap).

Prompt tokens are counted with tiktoken where it is installed and its encoding for the model is
already on disk (it downloads encodings on first use, which an offline machine cannot do);
otherwise estimated from characters: ``CHARS_PER_TOKEN`` characters a token plus
``PER_MESSAGE`` tokens a message (the role and separators OpenAI's chat format adds). The
flowkit test server charges by its own implementation of the same published rules
(``flowkit.testing.charges``, which imports nothing from here), so a test that the pacer's
estimate equals the server's charge can fail; a real endpoint's charge is learned from its
headers (``ChargeLearner``: the fall of the remaining tokens between two readings, and
``Replay``: each reading's shortfall from the top, replayed against the requests sent, for an
endpoint flowkit overcharges).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Literal

TokenCharge = Literal["prompt_plus_max", "max_of", "usage"]
RULES: tuple[TokenCharge, ...] = ("prompt_plus_max", "max_of", "usage")
CHARS_PER_TOKEN = 4
"""Characters a token in the estimate (OpenAI's rule of thumb for English text)."""
PER_MESSAGE = 4
"""Tokens each chat message adds for its role and separators (3 in OpenAI's count, plus one)."""


class OverBudget(ValueError):
    """A request that alone costs more than the endpoint's whole tokens-per-minute budget: no
    wait would ever let it through, so it is refused before it is sent."""


def default_rule(kind: str, public_openai: bool) -> TokenCharge:
    """The rule an endpoint of ``kind`` charges by when its connection names none."""
    return "max_of" if kind == "openai" and public_openai else "prompt_plus_max"


def message_chars(messages: Sequence[dict[str, Any]]) -> int:
    """Characters of the messages' text (a list of content parts counts its text parts)."""
    chars = 0
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            chars += sum(
                len(str(part.get("text", ""))) for part in content if isinstance(part, dict)
            )
    return chars


def prompt_tokens(model: str, messages: Sequence[dict[str, Any]]) -> int:
    """The prompt's tokens: tiktoken's count where its encoding for ``model`` loads offline,
    else the characters-based estimate."""
    encode = _encoder(model)
    if encode is None:
        return message_chars(messages) // CHARS_PER_TOKEN + PER_MESSAGE * len(messages)
    total = 3  # every reply is primed with <|start|>assistant<|message|>
    for message in messages:
        content = message.get("content")
        text = content if isinstance(content, str) else ""
        if isinstance(content, list):
            text = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        total += 3 + len(encode(text)) + len(encode(str(message.get("role", ""))))
    return total


def output_cap(params: dict[str, Any]) -> int:
    """The most tokens the reply may take: ``max_completion_tokens`` (or ``max_tokens``) × n;
    0 when the request sets no cap."""
    cap = params.get("max_completion_tokens") or params.get("max_tokens") or 0
    return int(cap) * int(params.get("n") or 1)


def arrival_charge(
    rule: TokenCharge, model: str, messages: Sequence[dict[str, Any]], params: dict[str, Any]
) -> int | None:
    """What the endpoint takes from its budget when the request arrives, or None when it charges
    by the reply's usage (the ``usage`` rule, or a request without an output cap)."""
    cap = output_cap(params)
    if rule == "usage" or not cap:
        return None
    if rule == "max_of":
        return max(cap, message_chars(messages) // CHARS_PER_TOKEN)
    return prompt_tokens(model, messages) + cap


_encoders: dict[str, Callable[[str], list[int]] | None] = {}


def _encoder(model: str) -> Callable[[str], list[int]] | None:
    """tiktoken's encoder for ``model`` when tiktoken is installed, knows the model and has its
    encoding cached on disk; None otherwise (remembered per model: asked on every request)."""
    if model in _encoders:
        return _encoders[model]
    found: Callable[[str], list[int]] | None = None
    try:
        import tiktoken
        import tiktoken.model

        name = tiktoken.model.encoding_name_for_model(model)
        if _cached(name):
            found = tiktoken.get_encoding(name).encode_ordinary
    except Exception:  # not installed, unknown model, a damaged cache: estimate instead
        found = None
    _encoders[model] = found
    return found


def _cached(encoding: str) -> bool:
    """Whether tiktoken would load ``encoding`` from its disk cache (where tiktoken keeps it:
    $TIKTOKEN_CACHE_DIR, else $DATA_GYM_CACHE_DIR, else its default folder, by the SHA-1 of
    the blob's URL) rather than download it. Set but empty, either variable turns tiktoken's
    cache off: every load downloads, so nothing counts as cached."""
    url = f"https://openaipublic.blob.core.windows.net/encodings/{encoding}.tiktoken"
    if encoding == "gpt2":
        return False  # two files from another URL: not worth a guess
    for name in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if name in os.environ:
            folder = os.environ[name]
            break
    else:
        folder = _default_cache_folder()
    if not folder:
        return False
    return os.path.exists(os.path.join(folder, hashlib.sha1(url.encode()).hexdigest()))


def _default_cache_folder() -> str:
    """tiktoken's own default cache folder: <tmp>/data-gym-cache up to 0.14, the folder its
    ``load._default_cache_dir`` names where a later version has one."""
    try:
        from tiktoken import load

        default = getattr(load, "_default_cache_dir", None)
        if callable(default):
            return str(default())
    except Exception:  # not installed, or laid out otherwise: the folder 0.14 uses
        pass
    return os.path.join(tempfile.gettempdir(), "data-gym-cache")


LEARN_AFTER = 3
"""Requests sent between readings that make one correction of the learned scale: fewer are
too few to tell a wrong rule from requests landing a little before or after a reading."""
FILL_MARGIN = 0.5
"""A span counts only if its refill is at most this fraction of what the budget lacked."""
SKEW = 0.005
"""Seconds the server's and the client's moments of a reading may differ by (the reply's travel
and handling): the refill over it must be small beside the charges a span measures."""
MAX_STEP = 4.0
"""The most one correction may multiply or divide the scale by (a misread header is not a rule)."""
AGREE = 3
"""Readings whose replayed scales must agree before the scale is set to them in one step."""
AGREEMENT = 1.25
"""How far apart (the largest over the smallest) the scales of readings that agree may be."""
LATE = 0.02
"""Seconds a reading may be read after the endpoint wrote it (the reply's travel, the client's
parsing on a busy machine): the replay's refill over it must be small beside a charge."""
KEPT = 256
"""Requests the replay keeps (their send times and estimates): enough for a second's budget."""


APART = 1.3
"""How far (as a factor) a measured scale must be from the one in force to replace it: rules
differ by more (prompt_plus_max charges a judge's request about 1.8 times max_of); readings
within it are noise, and following them swung the pace of a rule declared right."""

RAISE = 1.1
"""The least factor by which the spans between readings raise the scale (they only raise it)."""


class ChargeLearner:
    """How the endpoint's real charge compares with the pacer's, learned from the fall of
    ``x-ratelimit-remaining-tokens`` between two replies.

    Between two readings the endpoint took ``r1 - r2 + refill`` tokens for the requests sent in
    between, and the pacer charged them its estimates; ``scale`` (what the scheduler multiplies
    its estimates by) moves to make the two equal, so a connection whose rule is wrong, or
    whose endpoint's tokenizer counts otherwise, converges within a few requests. A span in
    which the budget may have filled up (its refill beyond the top is lost) or ran dry (the
    header stops at 0) says nothing and is skipped.
    """

    def __init__(self) -> None:
        self.scale = 1.0
        self._charged = 0.0  # net tokens charged to the pace, ever
        self._sent = 0  # requests charged, ever (refunded ones taken off)
        self._last: tuple[float, int, float, int, float | None] | None = None
        self._full = 0  # the most ever left: the budget's top is at least this
        self._whole = False  # whether a reading showed the budget whole (so _full is its top)
        self._readings = 0
        self._top = 0.0  # the budget's top, from what is left and the reset
        self._real = self._estimated = 0.0
        self._requests = 0
        self._updates = 0
        self.replay = Replay()
        """The endpoint's budget replayed from the unscaled estimates (see ``Replay``)."""

    def charged(
        self, tokens: float, requests: int, scale: float | None = None, now: float | None = None
    ) -> None:
        """The pace was charged ``tokens`` (refunded, if negative) for ``requests`` sent, at
        ``scale`` (the scale when the charge was reckoned, for a request sent) at ``now``."""
        self._charged += tokens
        self._sent += requests
        if now is not None:
            self.replay.charged(now, tokens / (scale if scale is not None else self.scale))

    def reading(
        self,
        now: float,
        remaining: int,
        limit: int,
        reset: float | None,
        window: float,
    ) -> None:
        """A reply said ``remaining`` of ``limit`` tokens per ``window`` are left (full again
        in ``reset`` seconds, when it says)."""
        last = self._last
        self._last = (now, remaining, self._charged, self._sent, reset)
        if remaining > self._full:
            self._full, self._whole = remaining, False
        # The replay starts from a full budget, so it needs the top exactly: what is left plus
        # what refills until the reset, where the endpoint says when; else the most seen left,
        # once a reading that says the budget is whole or a second one shows it.
        if reset is not None:
            self._top = max(self._top, remaining + reset * limit / window)
        self._whole |= remaining == self._full and self._readings > 0
        self._readings += 1
        top = self._top or (self._full if self._whole else 0.0)
        agreed = None
        if top and remaining > 0:
            agreed = self.replay.reading(now, remaining, top, limit / window)
        if agreed is not None and agreed < self.scale:
            # Several readings agree that the endpoint charges less than the estimates: take it
            # at once, and measure the spans afresh at the new scale. Only less: a reply read
            # late and a request sent late (a busy client) both make the replay see more refill
            # than the endpoint had, so it finds too high a scale, never too low; the fall
            # between two readings measures a higher one.
            if self._move(agreed):
                self._real = self._estimated = 0.0
                self._requests = 0
            return
        if last is None:
            return
        then, left, charged, sent, full_in = last
        refill = limit * (now - then) / window
        # Whether the budget may have reached its top: judged with a margin of half the span's
        # refill, for the reset header's rounding and the replies' travel time.
        if full_in is not None:
            filled = now - then >= FILL_MARGIN * full_in
        else:
            filled = left + refill / FILL_MARGIN >= self._full
        estimated, requests = self._charged - charged, self._sent - sent
        if filled or left <= 0 or remaining <= 0 or requests <= 0:
            return
        if limit / window * SKEW > estimated / 10:
            return  # the refill's uncertainty would drown what the requests were charged
        self._real += left - remaining + refill
        self._estimated += estimated
        self._requests += requests
        if self._requests < LEARN_AFTER:
            return  # after the first correction, only a longer span may say it was off
        ratio = min(MAX_STEP, self._real / self._estimated)
        self._real = self._estimated = 0.0
        self._requests = 0
        if ratio < RAISE:
            # Only more: the spans a busy client can measure are biased low (a span is skipped
            # when the budget ran dry, which is when the requests read late fall in it), and a
            # lower charge is the replay's to find.
            return
        # The first correction in full (the requests queued behind it are charged right),
        # then halfway each time: readings are noisy, a rule does not change.
        self._move(self.scale * (ratio if self._updates == 0 else ratio**0.5), apart=1.0)

    def _move(self, scale: float, *, apart: float = APART) -> bool:
        """Charge ``scale`` × the estimates from now on, if it is ``apart`` from the scale in
        force; whether the scale moved."""
        if max(scale / self.scale, self.scale / scale) < apart:
            return False  # within the readings' noise of the rule in force: keep it
        self.scale = scale
        self._updates += 1
        return True


class Replay:
    """The endpoint's token budget replayed from the pacer's unscaled estimates.

    A reply's ``x-ratelimit-remaining-tokens`` is the endpoint's budget as it stood: its top
    (the most ever seen left) less what the requests of the last moments were charged, plus the
    refill since. Replaying the requests sent (at their send times, refilling at the limit's pace,
    refusing what would not fit, as the endpoint does) with each estimate multiplied by a scale
    gives the budget the endpoint would report if it charged that scale; the scale that gives
    the reported figure is what the endpoint charges against the estimates. Unlike the fall
    between two readings (``ChargeLearner``), this needs no span in which the budget neither
    filled nor ran dry: an endpoint charged less than flowkit thinks keeps its budget near the
    top, and each reading that finds it a little below says by how much. When ``AGREE``
    readings in a row agree, the scale is set to theirs in one step.
    """

    def __init__(self) -> None:
        self._sends: deque[tuple[float, float]] = deque(maxlen=KEPT)
        self._found: list[float] = []

    def charged(self, now: float, estimate: float) -> None:
        """``estimate`` tokens (unscaled) were charged at ``now``; a negative one was given back
        (a refused request, a reply shorter than reserved)."""
        if estimate:
            self._sends.append((now, estimate))

    def _left(self, scale: float, now: float, top: float, rate: float) -> float:
        """What the endpoint would report left at ``now`` if it charged ``scale`` × estimates."""
        level, stamp = top, None
        for sent, estimate in self._sends:
            if sent > now:
                break
            if stamp is not None:
                level = min(top, level + (sent - stamp) * rate)
            stamp = sent
            charge = scale * estimate
            if charge < 0 or level >= min(charge, top):  # what would not fit is refused
                level = min(top, level - charge)
        if stamp is not None:
            level = min(top, level + (now - stamp) * rate)
        return level

    def reading(self, now: float, remaining: int, top: float, rate: float) -> float | None:
        """The scale ``AGREE`` readings agree on, once the last of them comes; else None."""
        sends = self._sends
        if not sends or rate <= 0 or top <= 0:
            return None
        # The replay starts at the top: only when the kept requests go back far enough for an
        # empty budget to have filled up since (or back to the first request).
        if len(sends) == KEPT and now - sends[0][0] < 2 * top / rate:
            return None
        each = sum(max(0.0, e) for _, e in sends) / len(sends)
        if rate * LATE > 0.1 * each:
            return None  # the refill over the replies' timing would drown a request's charge
        lo, hi = 1.0 / (MAX_STEP * 2.5), MAX_STEP * 2.5
        # A reading at the top or at empty bounds the scale but does not measure it; one
        # within a fraction of a request of either edge drowns in the replies' timing.
        if not 0.1 * each < remaining < top - 0.1 * each:
            return None
        if not self._left(hi, now, top, rate) < remaining < self._left(lo, now, top, rate):
            return None
        for _ in range(24):
            mid = (lo * hi) ** 0.5
            if self._left(mid, now, top, rate) > remaining:
                lo = mid
            else:
                hi = mid
        found = self._found
        found.append((lo * hi) ** 0.5)
        del found[:-AGREE]
        if len(found) < AGREE or max(found) > AGREEMENT * min(found):
            return None
        agreed = sorted(found)[AGREE // 2]
        found.clear()
        return agreed
