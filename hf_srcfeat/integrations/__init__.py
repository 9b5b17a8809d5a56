"""Other runtimes a trained model can be handed to (CTranslate2)."""
