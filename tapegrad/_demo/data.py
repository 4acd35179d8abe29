"""Data sets the demo makes itself (no downloads): three spirals, handwriting-like digits
and a small English-like text."""
# tapegrad: no kernels (pure Python: editing it recompiles nothing)
import numpy as np


def spirals(n, classes=3, seed=0, noise=0.5):
    """n points on `classes` interleaved spiral arms (a classic small benchmark that a
    linear model cannot separate)."""
    rng = np.random.default_rng(seed)
    label = rng.integers(0, classes, n)
    r = rng.uniform(0.05, 1.0, n)
    angle = label * (2 * np.pi / classes) + 6.0 * r + noise * rng.standard_normal(n)
    pts = np.stack([r * np.sin(angle), r * np.cos(angle)], 1)
    return pts.astype(np.float32), label.astype(np.int64)


# Each digit as pen strokes (segments between points of a 3 x 5 grid, x to the right and
# y downwards, both in [0, 1]): a seven-segment skeleton with a few diagonals, so that
# 1/7, 3/9 and 5/6 differ in more than one stroke.
_P = {"tl": (0, 0), "tr": (1, 0), "ml": (0, .5), "mr": (1, .5), "bl": (0, 1), "br": (1, 1),
      "tc": (.5, 0), "bc": (.5, 1), "mc": (.5, .5)}
_STROKES = {
    0: [("tl", "tr"), ("tr", "br"), ("br", "bl"), ("bl", "tl"), ("bl", "tr")],
    1: [("tc", "bc"), ("tc", "ml")],
    2: [("tl", "tr"), ("tr", "mr"), ("mr", "bl"), ("bl", "br")],
    3: [("tl", "tr"), ("tr", "br"), ("br", "bl"), ("ml", "mr")],
    4: [("tl", "ml"), ("ml", "mr"), ("tr", "br")],
    5: [("tr", "tl"), ("tl", "ml"), ("ml", "mr"), ("mr", "br"), ("br", "bl")],
    6: [("tr", "tl"), ("tl", "bl"), ("bl", "br"), ("br", "mr"), ("mr", "ml")],
    7: [("tl", "tr"), ("tr", "bc")],
    8: [("tl", "tr"), ("tr", "br"), ("br", "bl"), ("bl", "tl"), ("ml", "mr")],
    9: [("mr", "ml"), ("ml", "tl"), ("tl", "tr"), ("tr", "br"), ("br", "bl")],
}


def digits(n, seed=0, size=28):
    """n images (n, 1, size, size) float32 in [0, 1] of the digits 0-9 drawn as pen
    strokes, each with its own slant, scale, position, stroke width and noise, and their
    labels (int64). A stand-in for MNIST that needs no download."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, n)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float64)
    pix = np.stack([xx.ravel(), yy.ravel()], 1)                # (size*size, 2)
    images = np.empty((n, size * size), np.float64)
    for i in range(n):
        strokes = _STROKES[int(labels[i])]
        a = np.array([_P[s] for s, _ in strokes], np.float64)
        b = np.array([_P[e] for _, e in strokes], np.float64)
        # an affine map per image: width, height, slant, centre
        w, h = rng.uniform(0.30, 0.45) * size, rng.uniform(0.45, 0.62) * size
        slant = rng.uniform(-0.35, 0.35)
        cx, cy = size / 2 + rng.uniform(-2.5, 2.5), size / 2 + rng.uniform(-2.5, 2.5)

        def place(p):
            x, y = (p[:, 0] - 0.5) * w, (p[:, 1] - 0.5) * h
            return np.stack([cx + x - slant * y, cy + y], 1)
        a, b = place(a + rng.normal(0, 0.04, a.shape)), place(b + rng.normal(0, 0.04, b.shape))
        d = b - a                                              # (segments, 2)
        t = ((pix[:, None, :] - a[None]) * d[None]).sum(-1) / np.maximum((d * d).sum(-1), 1e-9)
        t = np.clip(t, 0.0, 1.0)
        near = a[None] + t[..., None] * d[None]
        dist = np.sqrt(((pix[:, None, :] - near) ** 2).sum(-1)).min(1)
        width = rng.uniform(0.9, 1.8)
        images[i] = np.clip(1.0 - (dist - width) / 1.2, 0.0, 1.0)
    images += rng.normal(0, 0.05, images.shape)
    return (np.clip(images, 0, 1).reshape(n, 1, size, size).astype(np.float32),
            labels.astype(np.int64))


_SUBJECTS = ["the old sailor", "a small dog", "my sister", "the baker", "every child",
             "the tired horse", "a quiet student", "the river", "our neighbour", "the wind"]
_VERBS = ["watched", "found", "carried", "painted", "followed", "remembered", "heard",
          "built", "lost", "opened"]
_OBJECTS = ["the red door", "a bright lamp", "the morning bread", "an empty boat",
            "the long road", "a letter", "the garden gate", "three apples", "the map",
            "a song"]
_PLACES = ["near the harbour", "under the bridge", "in the kitchen", "before dawn",
           "after the rain", "by the old mill", "on the hill", "at the market"]
_JOINS = ["and then", "but", "so", "while"]


def text(n_sentences=600, seed=0):
    """A small English-like text written by a seeded grammar (subjects, verbs, objects,
    places, joined clauses, paragraphs): the character transformer's corpus."""
    rng = np.random.default_rng(seed)
    pick = lambda words: words[int(rng.integers(len(words)))]   # noqa: E731
    out = []
    for k in range(n_sentences):
        clause = f"{pick(_SUBJECTS)} {pick(_VERBS)} {pick(_OBJECTS)}"
        if rng.random() < 0.6:
            clause += f" {pick(_PLACES)}"
        if rng.random() < 0.35:
            clause += f", {pick(_JOINS)} {pick(_SUBJECTS)} {pick(_VERBS)} {pick(_OBJECTS)}"
        sentence = clause[0].upper() + clause[1:] + ("?" if rng.random() < 0.08 else ".")
        out.append(sentence + ("\n\n" if k % 7 == 6 else " "))
    return "".join(out)


def char_dataset(corpus):
    """(vocabulary, token ids int64) of a text: characters sorted, one id each."""
    vocab = sorted(set(corpus))
    index = {c: i for i, c in enumerate(vocab)}
    return vocab, np.array([index[c] for c in corpus], np.int64)
