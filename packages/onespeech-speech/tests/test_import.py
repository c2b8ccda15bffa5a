import onespeech.speech


def test_package_imports_with_version() -> None:
    assert onespeech.speech.__version__ == "0.1.0"


def test_the_encoder_errors_and_the_documented_reader_path_still_import() -> None:
    """The speaker encoder lives in onespeech-features; its errors stay exported by
    onespeech.speech and the reader's documented former module still imports it."""
    import onespeech.features as features
    from onespeech.speech.speakers import torch_checkpoint

    for name in torch_checkpoint.__all__:
        assert getattr(torch_checkpoint, name) is getattr(features, name)
    for name in ("CheckpointFormatError", "CheckpointRefusedError", "EncoderWeightsError",
                 "SpeakerModelNotFoundError", "TorchCheckpointError"):  # fmt: skip
        assert getattr(onespeech.speech, name) is getattr(features, name)
        assert getattr(onespeech.speech.errors, name) is getattr(features, name)
