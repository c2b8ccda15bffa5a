import onespeech.features


def test_package_imports_with_version() -> None:
    assert onespeech.features.__version__ == "0.1.0"


def test_the_package_registers_the_vad_and_speaker_kinds() -> None:
    from onespeech.kernels.catalog import get_entry
    from onespeech.kernels.registry import model_kind

    for kind, entry in (("vad", "silero-vad"), ("speaker", "resemblyzer")):
        assert model_kind(kind).catalog_dir == onespeech.features.models.CATALOG_DIR
        assert get_entry(entry).kind == kind
