"""sima.cpp's seeded random streams of the data, in Python, for results/torch_twin.py: the same
training subset, evaluation subset, validation split, batch order, crop offsets and flips.

  Xoshiro              sima::Generator (core/rng.cpp): xoshiro256** (Blackman & Vigna), its
                       state seeded by splitmix64; randint by rejection of the top partial block
  seeded_permutation   train/config/data_spec.cpp: Fisher-Yates from the top with Xoshiro(seed)
  random_subset        the sorted first n of that permutation (data.train_subset, test_subset)
  holdout_split        the sorted first n held out (data.validation), the rest trains
  epoch_order          data/loader_pipeline.cpp: the epoch's visiting order, Fisher-Yates with
                       Xoshiro(hash_seed(seed, "order", epoch, 0))
  crop_flip_draws      data/loader.cpp: sample `index` of epoch `epoch` draws from its own
                       Xoshiro(hash_seed(seed, "sampl", epoch, index)); train/config/transforms_factory.cpp's
                       random_crop draws top, then left (when padded), horizontal_flip a uniform
Checked against sima.cpp: tests/train/test_sima_rng_twin.cpp (ctest train.test_sima_rng_twin)
compares the generator's draws, the epoch orders, the per-sample seeds, the subsets and the split
with the C++ functions they port; tests/results/torch_twin_smoke.sh (the evaluation subsets and
the validation split give sima-train's top-1 and loss) and the twin's step losses from sima.cpp's
initial weights (--init-from).
"""

M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
ORDER_TAG, SAMPLE_TAG = 0x6f72646572, 0x73616d706c  # "order", "sampl"


def splitmix64(x):  # splitmix64's step and finaliser on x
    z = (x + GOLDEN) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def hash_seed(seed, tag, epoch, i):  # mix(mix(mix(seed ^ mix(tag)) ^ epoch) ^ i)
    h = splitmix64(seed ^ splitmix64(tag))
    h = splitmix64(h ^ (epoch & M64))
    return splitmix64(h ^ (i & M64))


class Xoshiro:
    """sima::Generator: xoshiro256** with a splitmix64-seeded state."""

    def __init__(self, seed):
        x, self.s = seed & M64, []
        for _ in range(4):
            self.s.append(splitmix64(x))
            x = (x + GOLDEN) & M64

    def next_u64(self):
        s0, s1, s2, s3 = self.s
        m = (s1 * 5) & M64
        r = ((((m << 7) | (m >> 57)) & M64) * 9) & M64
        t = (s1 << 17) & M64
        s2 ^= s0
        s3 ^= s1
        s1 ^= s2
        s0 ^= s3
        s2 ^= t
        s3 = ((s3 << 45) | (s3 >> 19)) & M64
        self.s = [s0, s1, s2, s3]
        return r

    def uniform(self):  # [0, 1) from the top 24 bits, a float32 in sima.cpp (exact in a double)
        return (self.next_u64() >> 40) * 2.0 ** -24

    def randint(self, n):  # uniform in [0, n)
        if n <= 1:
            return 0
        limit = M64 - M64 % n
        while True:
            r = self.next_u64()
            if r < limit:
                return r % n


def fisher_yates(n, gen):  # for i = n-1 .. 1: swap order[i] with order[randint(i + 1)]
    perm = list(range(n))
    for i in range(n - 1, 0, -1):
        j = gen.randint(i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    return perm


def seeded_permutation(size, seed):
    return fisher_yates(size, Xoshiro(seed))


def random_subset(indices, n, seed):  # sorted perm[:n] of the dataset `indices`; 0 or n >= size: all
    if n == 0 or n >= len(indices):
        return indices
    return [indices[i] for i in sorted(seeded_permutation(len(indices), seed)[:n])]


def holdout_split(size, n, seed):  # (train, validation) dataset indices; needs 0 < n < size
    perm = seeded_permutation(size, seed)
    return sorted(perm[n:]), sorted(perm[:n])


def epoch_order(n, seed, epoch):  # the order epoch `epoch` (0-based) visits samples 0..n-1
    return fisher_yates(n, Xoshiro(hash_seed(seed, ORDER_TAG, epoch, 0)))


def crop_flip_draws(seed, epoch, index, padding, hflip):
    """(top, left, flip) of sample `index` in epoch `epoch`: random_crop on the image padded by
    `padding` (28 + 2 padding -> 28: offsets in [0, 2 padding]), then horizontal_flip(hflip)."""
    g = Xoshiro(hash_seed(seed, SAMPLE_TAG, epoch, index))
    top = left = 0
    if padding > 0:
        top = g.randint(2 * padding + 1)
        left = g.randint(2 * padding + 1)
    flip = hflip > 0 and g.uniform() < hflip
    return top, left, flip
