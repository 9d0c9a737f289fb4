"""The share of each language in the rows a multilingual run actually trained on (``train_language_share_<lang>``,
docs/pretraining.md#several-languages): a feature of :class:`~mlm_suite.training.trainer.JobTrainer`.

Every training row of such a run carries its language's index (``language_id``, a row tag the masking collator
returns in every batch layout). :class:`LanguageShares` takes the tags out of each micro-batch before the model sees
it and counts them where they are (a :class:`~mlm_suite.training.device_tallies.DeviceCounts`: no kernel, no wait
per step). The counts of every
process are added at the end, and each checkpoint carries them, so a resumed run reports the uninterrupted run's
shares. Rows skipped on resuming never reach the feature; rows that did are the rows trained on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mlm_suite.data.pretraining.masking import ROW_TAGS
from mlm_suite.training.device_tallies import DeviceCounts
from mlm_suite.training.features import Progress, Run, TrainerFeature

__all__ = ["LANGUAGE_ROWS_STATE", "LanguageShares"]

#: The rows of each language trained so far, carried by each checkpoint (an entry of trainer_state.json's
#: ``stateful_callbacks``).
LANGUAGE_ROWS_STATE = "LanguageRows"

_TAG = ROW_TAGS[0]


class LanguageShares(TrainerFeature):
    """Counts the training rows of each of ``languages`` (``language_id`` i is ``languages[i]``) and removes the
    tag from the batches; :meth:`shares` is every process's count, as shares of the rows trained."""

    def __init__(self, languages: Sequence[str]) -> None:
        self.languages = list(languages)
        self._resumed = [0] * len(self.languages)
        self._counts = DeviceCounts(len(self.languages))  # this call's tags
        self._gather = None

    def start(self, run: Run) -> None:
        record = run.state.get("stateful_callbacks", {}).get(LANGUAGE_ROWS_STATE, {}).get("attributes", {})
        self._resumed = [int(record.get("rows", {}).get(language, 0)) for language in self.languages]
        self._counts, self._gather = DeviceCounts(len(self.languages)), run.gather

    def batches(self, batches: list[dict[str, Any]], num_items: Any) -> Any:
        for batch in batches:
            tags = batch.pop(_TAG, None)
            if tags is not None:
                self._counts.add(tags)
        return num_items

    def checkpoint(self, folder: str, progress: Progress) -> dict[str, dict[str, Any]]:
        return {LANGUAGE_ROWS_STATE: {"args": {}, "attributes": {"rows": dict(zip(self.languages, self.rows()))}}}

    def rows(self) -> list[int]:
        """The training rows per language so far, every process's and the resumed checkpoint's (it recorded every
        process's): waits for the device, and gathers from every process when several train."""
        counts = self._counts.counts()  # (languages,)
        gathered = self._gather(counts[None]) if self._gather is not None else counts[None]  # (processes, languages)
        return [before + int(now) for before, now in zip(self._resumed, gathered.sum(0).tolist())]

    def shares(self) -> dict[str, float]:
        """``train_language_share_<language>``: each language's share of the rows trained (every process's)."""
        rows = self.rows()
        total = sum(rows) or 1
        return {f"train_language_share_{language}": count / total for language, count in zip(self.languages, rows)}
