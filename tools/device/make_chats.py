#!/usr/bin/env python3
"""Synthetic conversations for tools/device/fine_tune.sh: OpenAI-style
{"messages": [...]} lines, deterministic (a fixed seed), with the spread of
lengths a chat corpus has (answers of a few words to a few thousand), so
windows pack many documents of different sizes. Usage: make_chats.py N."""
import json
import random
import sys

WORDS = ("the model data token layer memory gradient shard batch step loss attention window document "
         "answer question train learn weight value kernel tensor device host copy stream program plan "
         "measure predict time peak reserve allocate free update optimizer rate warm decay clip norm").split()


def sentence(rng, words):
    return " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."


def text(rng, words):
    parts, left = [], words
    while left > 0:
        n = min(left, rng.randint(6, 18))
        parts.append(sentence(rng, n))
        left -= n
    return " ".join(parts)


def main():
    n = int(sys.argv[1])
    rng = random.Random(36)
    for _ in range(n):
        messages = [{"role": "system", "content": "You answer questions about training."}]
        for _ in range(rng.choice((1, 1, 1, 2, 3))):
            messages.append({"role": "user", "content": text(rng, rng.randint(5, 60)) + "?"})
            # Log-uniform answer lengths: 10 to 2,500 words.
            messages.append({"role": "assistant", "content": text(rng, int(10 * 250 ** rng.random()))})
        print(json.dumps({"messages": messages}))


if __name__ == "__main__":
    main()
