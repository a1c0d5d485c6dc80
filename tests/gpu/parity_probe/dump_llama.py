# Parity probe: dumps llama.cpp intermediates (cb_eval) of reference prompt N, configured as
# tests/reference/make_reference.py. Usage: python dump_llama.py N OUT.npz [fa|nofa] [decode]
# Dump llama.cpp intermediates (cb_eval) for one reference prompt, same config as make_reference.py.
import ctypes, json, sys, numpy as np, llama_cpp
from pathlib import Path
from llama_cpp import Llama
ROOT = Path(__file__).resolve().parents[3]  # the repository
pi = int(sys.argv[1]); out = sys.argv[2]
fa = len(sys.argv) > 3 and sys.argv[3] == "fa"
g = json.load(open(ROOT / 'tests/reference/smollm2_greedy.json'))
ids = g['prompts'][pi]['prompt_ids']
base = ctypes.CDLL(llama_cpp.__path__[0] + '/lib/libggml-base.so')
base.ggml_get_name.restype = ctypes.c_char_p; base.ggml_get_name.argtypes=[ctypes.c_void_p]
base.ggml_nelements.restype = ctypes.c_int64; base.ggml_nelements.argtypes=[ctypes.c_void_p]
base.ggml_is_contiguous.restype = ctypes.c_bool; base.ggml_is_contiguous.argtypes=[ctypes.c_void_p]
dumps = []
@llama_cpp.ggml_backend_sched_eval_callback
def cb(t, ask, ud):
    if ask: return True
    name = base.ggml_get_name(t).decode()
    typ = ctypes.c_int32.from_address(t).value
    ne = [ctypes.c_int64.from_address(t + 16 + 8*i).value for i in range(4)]
    data = ctypes.c_void_p.from_address(t + 248).value
    if typ == 0 and base.ggml_is_contiguous(t) and data:
        n = base.ggml_nelements(t)
        arr = np.ctypeslib.as_array((ctypes.c_float * n).from_address(data)).copy()
        dumps.append((name, ne, arr))
    elif typ == 1 and base.ggml_is_contiguous(t) and data:
        n = base.ggml_nelements(t)
        arr = np.ctypeslib.as_array((ctypes.c_uint16 * n).from_address(data)).copy().view(np.float16).astype(np.float32)
        dumps.append((name, ne, arr))
    else:
        dumps.append((name, ne, None))
    return True
llm = Llama(model_path=str(ROOT / 'models/SmolLM2-135M-Instruct.Q4_1.gguf'), n_ctx=2048, n_batch=512,
            logits_all=False, n_threads=2, seed=0, verbose=False, flash_attn=fa)
llm._ctx.ctx  # ensure
# set callback on existing context: recreate context params
llm.context_params.cb_eval = cb
from llama_cpp import _internals
llm._ctx = _internals.LlamaContext(model=llm._model, params=llm.context_params, verbose=False)
llm._batch = _internals.LlamaBatch(n_tokens=llm.n_batch, embd=0, n_seq_max=llm.context_params.n_ctx, verbose=False)
decode = len(sys.argv) > 4 and sys.argv[4] == 'decode'
llm.reset()
if decode:
    llm.eval(ids); dumps.clear(); llm.eval([g['prompts'][pi]['generated_ids'][0]])
else:
    llm.eval(ids)
ptr = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
logits = np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)).astype(np.float32).copy()
print('top5', [(int(i), float(logits[i])) for i in np.argsort(-logits)[:5]])
print('ref ', g['prompts'][pi]['top'][1 if decode else 0])
d = {}
cnt = {}
for name, ne, arr in dumps:
    k = name; c = cnt.get(k, 0); cnt[k] = c + 1
    if arr is not None: d[f"{k}#{c}"] = arr.reshape([x for x in ne[::-1] if True])
np.savez(out, logits=logits, **d)
print(sorted(set(n for n,_,_ in dumps))[:80])
print([(n, ne) for n, ne, a in dumps[:40]])
