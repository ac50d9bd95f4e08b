"""`promptflow.tools`: the chat helpers flow code calls (`aoai.chat`, `openai.chat`), the
embedding tool and the prompt helpers of `common`, each answering through flowkit.llm so that
the calls are scheduled, retried and counted like an llm node's.
"""
