"""CUDA attention check for gpu_check.sh, on one GPU: the local path (packed sequences, each
causal on its own) and the sharded path's decomposition (a query chunk's unmasked prefix and
causal square merged by log-sum-exp) against unpacked attention.

Writes ``{"local": max_abs_err, "merge": max_abs_err, "device": name}``; exits 1 above 2e-2
(bf16)."""

import argparse
import json

import torch
import torch.nn.functional as F


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    a = p.parse_args()
    dev, dt = "cuda", torch.bfloat16
    torch.manual_seed(0)
    h, d, s = 8, 64, 4096
    q, k, v = (torch.randn(1, h, s, d, device=dev, dtype=dt) for _ in range(3))
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True).float()
    # Local path: two packed sequences, each causal on its own, against each alone.
    half = s // 2
    local = torch.cat([F.scaled_dot_product_attention(q[:, :, i:i + half], k[:, :, i:i + half],
                                                      v[:, :, i:i + half], is_causal=True)
                       for i in (0, half)], dim=2).float()
    ref_local = torch.cat([F.scaled_dot_product_attention(
        q[:, :, i:i + half].float(), k[:, :, i:i + half].float(), v[:, :, i:i + half].float(),
        is_causal=True) for i in (0, half)], dim=2)
    # Sharded decomposition: the query chunk [p0, p1) = unmasked prefix [0, p0) merged by
    # log-sum-exp with the causal square [p0, p1).
    p0, p1 = s // 2, s
    qc = q[:, :, p0:p1].float()
    scale = d ** -0.5

    def part(keys, vals, causal):
        w = qc @ keys.float().transpose(-1, -2) * scale
        if causal:
            w = w.masked_fill(torch.ones_like(w, dtype=torch.bool).triu(1), float("-inf"))
        lse = torch.logsumexp(w, -1, keepdim=True)
        return torch.softmax(w, -1) @ vals.float(), lse
    o1, l1 = part(k[:, :, :p0], v[:, :, :p0], False)
    o2, l2 = part(k[:, :, p0:p1], v[:, :, p0:p1], True)
    lse = torch.logaddexp(l1, l2)
    merged = o1 * (l1 - lse).exp() + o2 * (l2 - lse).exp()
    errs = {"local": float((local - ref_local).abs().max()),
            "merge": float((merged - ref[:, :, p0:p1]).abs().max()),
            "device": torch.cuda.get_device_name()}
    json.dump(errs, open(a.out, "w"))
    print(errs)
    raise SystemExit(0 if errs["local"] < 2e-2 and errs["merge"] < 2e-2 else 1)


if __name__ == "__main__":
    main()
