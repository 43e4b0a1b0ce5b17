# Sourced by scripts/test.sh after venv.sh: PyTorch's CPU build for the real two-process
# torch.distributed test of gangs (tests/backends/test_ddp.py). Installed only from a wheel
# already on this machine (pip's find-links, e.g. /opt/wheels, holding torch 2.13.0 for the
# CPU): from PyPI, torch for x86_64 is a CUDA build of several GB, which CI should not
# download. Without such a wheel the DDP test skips and says why.
_frachub_torch_wheel() {
    local dir
    for dir in ${PIP_FIND_LINKS:-} /opt/wheels; do
        ls "$dir"/torch-2.13.0[-+]*.whl 2>/dev/null | head -n1
    done | head -n1
}
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
    if [ -n "$(_frachub_torch_wheel)" ]; then
        echo "torch.sh: installing torch 2.13.0 (CPU) from $(_frachub_torch_wheel)" >&2
        "$VENV/bin/pip" install -q "torch==2.13.0" >&2
    else
        echo "torch.sh: no local torch 2.13.0 wheel: tests/backends/test_ddp.py will skip" >&2
    fi
fi
unset -f _frachub_torch_wheel
