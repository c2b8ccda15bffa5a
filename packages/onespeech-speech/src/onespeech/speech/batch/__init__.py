"""Batch transcription of a corpus, resumable, on local worker processes or a Ray cluster.

Public API: ``transcribe_corpus``, ``BatchReport`` (with ``FileFailure``,
``WorkerLoad``), ``expand_inputs`` and ``ManifestError``. Ray is optional:
``pip install 'onespeech-speech[ray]'``.
"""

from onespeech.speech.batch.corpus import transcribe_corpus
from onespeech.speech.batch.inputs import CorpusItem, ManifestError, expand_inputs
from onespeech.speech.batch.report import BatchReport, FileFailure, WorkerLoad

__all__ = [
    "BatchReport",
    "CorpusItem",
    "FileFailure",
    "ManifestError",
    "WorkerLoad",
    "expand_inputs",
    "transcribe_corpus",
]
