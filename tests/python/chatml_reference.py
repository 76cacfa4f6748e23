"""The trainer's rendering of a training row (src/train/dataset.h), written with the `tokenizers`
library: what the training tests and bench/sft_bench.py compare `musacoder train` against."""


def render(tok, row):
    """Token ids and loss mask of a {messages}, {prompt, completion} or {text} row."""
    ids, mask = [], []

    def add(text, m):
        if text:
            e = tok.encode(text, add_special_tokens=False).ids
            ids.extend(e)
            mask.extend([m] * len(e))
    if "text" in row:
        add(row["text"], 1)
        ids.append(tok.token_to_id("<|endoftext|>"))
        mask.append(1)
        return ids, mask
    msgs = row.get("messages") or [{"role": "user", "content": row["prompt"]}, {"role": "assistant", "content": row["completion"]}]
    context = ""
    for t in msgs:
        if t["role"] != "assistant" or t.get("weight", 1) == 0:  # weight 0: context (a repair's failed answer)
            context += f"<|im_start|>{t['role']}\n{t['content']}<|im_end|>\n"
            continue
        add(context + "<|im_start|>assistant\n", 0)
        add(t["content"], 1)
        add("<|im_end|>", 1)
        context = "\n"
    add(context, 0)
    return ids, mask
