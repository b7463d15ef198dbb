# The speed probe of `multinode check --gpu`, run by `check --local` with
# the job's own python3 (`python3 -B -c`, this text carried in the binary),
# within a time limit. Each GPU the job sees, one after another: a bf16
# matmul (8192 x 8192 x 8192, 20 times) in TFLOPs, and pinned copies of
# 256 MiB host to device and device to host (10 times each) in GB/s.
# Prints one JSON line: {"torch": VERSION, "gpus": [...]}, or
# {"skipped": WHY} where torch or CUDA is missing. Writes no file; what it
# allocated goes with the process.
import json
import os
import sys
import time

# Ordinals in PCI order: nvidia-smi's, narrowed by CUDA_VISIBLE_DEVICES.
os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"


def main():
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - any import failure is a skip
        return {"skipped": "no torch for %s (%s)" % (sys.executable, type(e).__name__)}
    if not torch.cuda.is_available():
        return {"skipped": "torch %s sees no CUDA GPU" % torch.__version__}
    gpus = []
    n, iters, copies = 8192, 20, 10
    size = 256 << 20
    for i in range(torch.cuda.device_count()):
        dev = torch.device("cuda", i)
        with torch.cuda.device(dev):
            a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
            b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
            for _ in range(3):
                a @ b
            torch.cuda.synchronize(dev)
            t = time.perf_counter()
            for _ in range(iters):
                a @ b
            torch.cuda.synchronize(dev)
            tflops = 2 * n**3 * iters / (time.perf_counter() - t) / 1e12
            del a, b
            host = torch.empty(size, dtype=torch.uint8, pin_memory=True)
            gpu = torch.empty(size, dtype=torch.uint8, device=dev)

            def rate(dst, src):
                dst.copy_(src, non_blocking=True)
                torch.cuda.synchronize(dev)
                t = time.perf_counter()
                for _ in range(copies):
                    dst.copy_(src, non_blocking=True)
                torch.cuda.synchronize(dev)
                return size * copies / (time.perf_counter() - t) / 1e9

            h2d, d2h = rate(gpu, host), rate(host, gpu)
            del host, gpu
            torch.cuda.empty_cache()
        gpus.append(
            {
                "ordinal": i,
                "name": torch.cuda.get_device_name(i),
                "matmul_tflops": round(tflops, 1),
                "h2d_gbs": round(h2d, 1),
                "d2h_gbs": round(d2h, 1),
            }
        )
    return {"torch": torch.__version__, "gpus": gpus}


print(json.dumps(main()), flush=True)
