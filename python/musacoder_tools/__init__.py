"""Tools of the training pipeline that live in the Python ecosystem (Hugging Face `tokenizers`)."""
