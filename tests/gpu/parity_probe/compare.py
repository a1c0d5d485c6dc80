# Parity probe: compare troupe's tapped intermediates (cpu_model_test --gtest_filter=*ParityProbe*,
# TROUPE_PARITY_DUMP=DIR TROUPE_PARITY_PROMPT=N [TROUPE_PARITY_DECODE=1]) with a dump_llama.py npz.
# Usage: .venv-ref/bin/python compare.py LL.npz DIR [layers]
import numpy as np, sys, os
ll = np.load(sys.argv[1]); od = sys.argv[2]; layers = [int(x) for x in sys.argv[3].split(',')] if len(sys.argv)>3 else [0,1,29]
E,Q,KV,F=576,576,192,1536
def ours(name, l, cols):
    return np.fromfile(f"{od}/{name}-{l}.f32", dtype=np.float32).reshape(-1, cols)
def L(name, idx=0):
    return ll[f"{name}#{idx}"]
def f16(a): return a.astype(np.float16).astype(np.float32)
def rep(tag, a, b):
    b = b.reshape(-1, a.shape[-1]) if a.size != b.size else b
    if a.size != b.size: a = a[-b.shape[0]:]
    a = a.reshape(b.shape)
    d = np.abs(a.astype(np.float64)-b)
    neq = np.count_nonzero(a != b)
    print(f"  {tag:12s} maxabs {d.max():.3e} mean {d.mean():.3e} neq {neq}/{a.size}  (scale {np.abs(b).max():.3g})")
for l in layers:
    print("layer", l)
    rep("attn_norm", ours("attn_norm", l, E), L(f"attn_norm-{l}").reshape(-1,E))
    qkv = ours("qkv", l, Q+2*KV)
    rep("Qcur", qkv[:, :Q], L(f"Qcur-{l}",0).reshape(-1,Q))
    rep("Kcur", qkv[:, Q:Q+KV], L(f"Kcur-{l}",0).reshape(-1,KV))
    rep("Vcur", qkv[:, Q+KV:], L(f"Vcur-{l}",0).reshape(-1,KV))
    qr = ours("qk_rope", l, Q+KV)
    rep("Q rope(f16)", qr[:, :Q], f16(L(f"Qcur-{l}",2).reshape(-1,Q)))
    rep("K rope", qr[:, Q:], L(f"Kcur-{l}",2).reshape(-1,KV))
    rep("kqv_out", ours("kqv_out", l, Q), L(f"kqv_out-{l}").reshape(-1,Q))
    rep("attn_out", ours("attn_out", l, E), L(f"attn_out-{l}").reshape(-1,E))
    rep("ffn_inp", ours("ffn_inp", l, E), L(f"ffn_inp-{l}").reshape(-1,E))
    rep("ffn_norm", ours("ffn_norm", l, E), L(f"ffn_norm-{l}").reshape(-1,E))
    gu = ours("gate_up", l, 2*F)
    rep("ffn_gate", gu[:, :F], L(f"ffn_gate-{l}").reshape(-1,F))
    rep("ffn_up", gu[:, F:], L(f"ffn_up-{l}").reshape(-1,F))
    rep("ffn_swiglu", ours("ffn_swiglu", l, F), L(f"ffn_swiglu-{l}").reshape(-1,F))
    rep("ffn_out", ours("ffn_out", l, E), L(f"ffn_out-{l}").reshape(-1,E))
    rep("l_out", ours("l_out", l, E), L(f"l_out-{l}").reshape(-1,E))
rn = L("result_norm").reshape(-1,E)[-1:]
rep("result_norm", ours("result_norm", -1, E), rn)
lo = ours("logits", -1, 49152)[0]; lr = ll["logits"]
rep("logits", lo, lr)
print("top ours", np.argsort(-lo)[:5], "ll", np.argsort(-lr)[:5])
