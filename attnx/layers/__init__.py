"""The layers and their training pieces: MultiHeadAttention, Transformer, SequenceModel
(with its stems, normalisation and pooling), the losses, AdamW and its schedules."""
