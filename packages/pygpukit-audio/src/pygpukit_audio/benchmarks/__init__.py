"""pygpukit-audio's suites of ``python -m pygpukit.benchmark`` (registered in
plugin.py): audio_fft (fft.py) and audio_dsp (dsp.py)."""
