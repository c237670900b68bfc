"""Naming the visible GPU (scangen.devices) from the Linux driver's listing, so that choosing
a tuning table need not initialise CUDA; the driver is asked only where the listing cannot
tell which GPU the process sees."""
import pytest

from scangen import devices

H100 = "NVIDIA H100 80GB HBM3"
INFORMATION = """Model: \t\t {model}
IRQ:             10
GPU UUID:        GPU-9221d5d1-b60b-a624-bf14-0a1819cfda3b
Bus Location:    {bus}
"""


def listing(tmp_path, *models):
    """A fake /proc/driver/nvidia/gpus with one folder per model."""
    gpus = tmp_path / "gpus"
    for k, model in enumerate(models):
        folder = gpus / f"0000:{k:02x}:00.0"
        folder.mkdir(parents=True)
        text = INFORMATION.format(model=model, bus=folder.name) if model else "IRQ: 10\n"
        (folder / "information").write_text(text)
    gpus.mkdir(parents=True, exist_ok=True)
    return gpus


@pytest.fixture(autouse=True)
def _no_visible_devices_setting(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


@pytest.mark.parametrize("count", [1, 2, 8])
def test_one_model_names_every_visible_device(tmp_path, count):
    gpus = listing(tmp_path, *[H100] * count)
    assert devices.listed_model(0, gpus) == H100
    assert devices.listed_model(count - 1, gpus) == H100
    assert devices.listed_model(count, gpus) is None  # no such device: the driver says


@pytest.mark.parametrize("setting, seen", [("0", 1), ("1,0", 2), ("3", 1), ("0,1,2,3", 4),
                                           ("GPU-9221d5d1-b60b", 1), (" 2 , 3", 2)])
def test_visible_devices_by_index_or_uuid(tmp_path, monkeypatch, setting, seen):
    gpus = listing(tmp_path, *[H100] * 4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", setting)
    assert devices.listed_model(seen - 1, gpus) == H100
    assert devices.listed_model(seen, gpus) is None


@pytest.mark.parametrize("setting", ["", "-1", "MIG-4b3c5f1e-8a2d-5e6f-9a0b-1c2d3e4f5a6b",
                                     "0,MIG-4b3c5f1e", "none"])
def test_settings_the_listing_cannot_read_are_left_to_the_driver(tmp_path, monkeypatch,
                                                                 setting):
    """No device, a MIG instance (which the driver names differently) or an entry CUDA may
    stop at."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", setting)
    assert devices.listed_model(0, listing(tmp_path, H100, H100)) is None


def test_mixed_models_or_unreadable_listings_are_left_to_the_driver(tmp_path):
    """Which of two models is device 0 depends on CUDA's order, not the listing's."""
    assert devices.listed_model(0, listing(tmp_path / "a", H100, "NVIDIA H200")) is None
    assert devices.listed_model(0, listing(tmp_path / "b", H100, None)) is None
    assert devices.listed_model(0, listing(tmp_path / "c")) is None
    assert devices.listed_model(0, tmp_path / "no such folder") is None


def test_the_driver_is_asked_only_where_the_listing_cannot_tell(tmp_path, monkeypatch):
    asked = []
    monkeypatch.setattr(devices, "name_from_driver",
                        lambda ordinal: asked.append(ordinal) or "NVIDIA H200")
    monkeypatch.setattr(devices, "PROC_GPUS", listing(tmp_path / "one", H100))
    assert devices.visible_device_name() == H100 and asked == []
    monkeypatch.setattr(devices, "PROC_GPUS", listing(tmp_path / "two", H100, "NVIDIA H200"))
    assert devices.visible_device_name() == "NVIDIA H200" and asked == [0]
