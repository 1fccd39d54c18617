"""The texts the post uses, so that every exercise, test and figure uses exactly the same ones."""

#: Demo 1 and 2: ten GPT-2 tokens.
PENGUIN_TEXT = "A wise man once said: Penguins are cute."

#: Figure 6 follows this token of the penguin sentence (the post's token index 8 on GPT-2).
#: Found by its text, so that every tokenizer follows the same word: see :func:`figure6_token`.
FIGURE6_TOKEN = " cute"

#: Demo 3: the opening of Kafka's *The Metamorphosis*, cut before the word the model must predict.
#: 109 characters (25 unique); 22 GPT-2 tokens (22 unique).
KAFKA_TEXT = (
    "As Gregor Samsa awoke one morning from uneasy dreams, "
    "he found himself transformed in his bed into a gigantic"
)

#: Demo 3's target: the next token whose log-probability the scaling experiment measures.
#: One GPT-2 token (id 12833). Note the leading space: GPT-2 tokens carry the space before a word.
TARGET_WORD = " insect"


def figure6_token(tokens: list[str]) -> int:
    """The index of :data:`FIGURE6_TOKEN` (``" cute"``) among the penguin sentence's token
    texts (``tokenizer.decode([id])`` of each id); the second to last token if a tokenizer
    spells it otherwise. GPT-2 gives 8 (of 10 tokens), SmolLM2 9 (of 11)."""
    stripped = [token.strip() for token in tokens]
    if FIGURE6_TOKEN.strip() in stripped:
        return stripped.index(FIGURE6_TOKEN.strip())
    return max(len(tokens) - 2, 0)


#: Exercises 6 and 7 (activation and attribution patching): two prompts of the same length that
#: differ only in the landmark, and the two answers the metric compares. 10 SmolLM2 tokens each,
#: 11 GPT-2 tokens each (``The``, `` E``, ``iffel``, `` Tower`` against ``The``, `` Col``,
#: ``osse``, ``um`` on SmolLM2, then `` is located in the city of``).
CLEAN_PROMPT = "The Eiffel Tower is located in the city of"
CORRUPTED_PROMPT = "The Colosseum is located in the city of"
#: The clean prompt's answer and the corrupted prompt's (one token each, with the leading space).
CLEAN_ANSWER = " Paris"
CORRUPTED_ANSWER = " Rome"
