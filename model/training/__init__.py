"""Training: corpus, vocabulary preparation, training, evaluation, BLEU and the model card.

The app never imports this package."""
