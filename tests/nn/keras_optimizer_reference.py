# Computes, once, the reference numbers pasted into tests/nn/optimizers_keras_test.cpp: Keras's own optimizers
# (Keras 3, JAX backend, float32) applied for three steps to fixed weights and gradients. Run as
#   python3 -m venv .cache/keras-venv && .cache/keras-venv/bin/pip install keras 'jax[cpu]'
#   KERAS_BACKEND=jax .cache/keras-venv/bin/python tests/nn/keras_optimizer_reference.py
# Not run by the tests (nothing is installed at test time for it); the printed C++ is the test's data.
import os
os.environ.setdefault("KERAS_BACKEND", "jax")
import keras
import numpy as np

W0 = [0.5, -1.0, 2.0, 0.25, -0.75]
GRADS = [[0.1, -0.2, 0.3, -0.4, 0.5], [-0.3, 0.1, 0.05, 0.2, -0.6], [0.2, 0.2, -0.1, 0.0, 0.4]]
S = keras.optimizers.schedules

CASES = {
    "sgd_momentum": lambda: keras.optimizers.SGD(0.1, momentum=0.9),
    "sgd_nesterov_weight_decay": lambda: keras.optimizers.SGD(0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
    "adam": lambda: keras.optimizers.Adam(0.01),
    "adamw": lambda: keras.optimizers.AdamW(0.01, weight_decay=0.1),
    "rmsprop": lambda: keras.optimizers.RMSprop(0.01),
    "rmsprop_centered_momentum": lambda: keras.optimizers.RMSprop(0.01, rho=0.8, momentum=0.5, centered=True),
    "adagrad": lambda: keras.optimizers.Adagrad(0.1, initial_accumulator_value=0.2, epsilon=1e-6),
    # Two variables (the first two and the last three values): the global norm is taken over both.
    "sgd_global_clipnorm": lambda: keras.optimizers.SGD(0.1, global_clipnorm=0.5),
    "sgd_clipvalue": lambda: keras.optimizers.SGD(0.1, clipvalue=0.25),
    "sgd_piecewise": lambda: keras.optimizers.SGD(S.PiecewiseConstantDecay([0, 1], [0.1, 0.05, 0.01]), momentum=0.5),
    "adam_cosine_warmup": lambda: keras.optimizers.Adam(
        S.CosineDecay(0.001, decay_steps=4, alpha=0.1, warmup_target=0.02, warmup_steps=2)),
}

def fmt(xs):
    return "{" + ", ".join(repr(float(np.float32(x))) + "f" for x in xs) + "}"

for name, make in CASES.items():
    opt = make()
    split = name == "sgd_global_clipnorm"
    if split:
        vs = [keras.Variable(np.array(W0[:2], np.float32)), keras.Variable(np.array(W0[2:], np.float32))]
    else:
        vs = [keras.Variable(np.array(W0, np.float32))]
    steps = []
    for g in GRADS:
        g = np.array(g, np.float32)
        gs = [g[:2], g[2:]] if split else [g]
        opt.apply([keras.ops.convert_to_tensor(x) for x in gs], vs)
        steps.append(np.concatenate([np.asarray(v.value) for v in vs]))
    print(f"// {name}")
    print("{" + ", ".join(fmt(s) for s in steps) + "},")

cos = S.CosineDecay(0.1, decay_steps=10, alpha=0.05, warmup_target=0.3, warmup_steps=4)
cos_plain = S.CosineDecay(0.1, decay_steps=10, alpha=0.05)
pw = S.PiecewiseConstantDecay([3, 6], [1.0, 0.5, 0.1])
print("// cosine_decay(0.1, 10, 0.05, 0.3, 4) at steps 0..15")
print(fmt([cos(i) for i in range(16)]))
print("// cosine_decay(0.1, 10, 0.05) at steps 0..11")
print(fmt([cos_plain(i) for i in range(12)]))
print("// piecewise_constant_decay({3, 6}, {1.0, 0.5, 0.1}) at steps 0..8")
print(fmt([pw(i) for i in range(9)]))
