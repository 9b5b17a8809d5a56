"""Configuration of latent feature feedback (Li, Li & Zhang, "Improving neural machine translation with
latent features feedback", Neurocomputing 2021): a latent feature encoder (LFE) runs over the source and the
mean of its higher layers is fed back into the self-attention of each NMT encoder layer."""

from __future__ import annotations

from collections.abc import Sequence

from .configuration_srcfeat_transformer import (
    SrcFeatTransformerConfig,
    check_choice,
    check_indices,
    check_positive_int,
)

#: How the LFE is trained with the translation model (Table 1): from scratch with it, or pre-trained as a
#: denoising autoencoder and then kept fixed or fine-tuned.
LFE_MODES = ("joint", "frozen", "fine_tuned")


class LatentFeedbackConfig(SrcFeatTransformerConfig):
    r"""
    Configuration of [`LatentFeedbackForConditionalGeneration`]. Takes every argument of
    [`SrcFeatTransformerConfig`], plus:

    Args:
        lfe_layers (`int`, *optional*):
            Number of layers J of the latent feature encoder; at least `encoder_layers` (I <= J). Default: I.
        feedback_layers (`list[int]`, *optional*):
            0-based NMT encoder layers whose self-attention receives feedback (Table 6: layers 1-3, 4-6 or
            1-6); default all.
        lfe_mode (`str`, *optional*, defaults to `"joint"`):
            `"joint"`: the LFE starts from random weights and trains with the translation model;
            `"frozen"`: a pre-trained LFE is kept fixed (no gradient, no dropout); `"fine_tuned"`: a pre-trained
            LFE trains further with the translation model.
        lfe_pretrained_from (`str`, *optional*):
            Folder or Hub id of the denoising autoencoder (`hf-srcfeat-pretrain-dae`) whose encoder initialises
            the LFE; required by `frozen` and `fine_tuned`. `model.load_pretrained_parts()` (called by
            `hf-srcfeat-train` for a new model) copies it; a saved translation model already holds the weights.
        share_lfe_parameters (`bool`, *optional*, defaults to `False`):
            Table 8: the LFE is the NMT encoder itself (same embeddings and layers), run once without feedback
            to produce the latent features; no parameters are added. With a pre-trained LFE, the DAE's
            embeddings and layers initialise the NMT encoder's.
        lfe_own_embeddings (`bool`, *optional*):
            Whether the LFE has token embeddings of its own. Default: only a pre-trained LFE (`frozen`,
            `fine_tuned`; Section 3: "since the LFE is independently pre-trained, we do not share its word
            embedding with the NMT encoder"); a `joint` LFE reads the NMT encoder's source embeddings, as Table 1
            counts it (joint 98.1M = Transformer-12, pre-trained + fine-tuned 114.5M = one embedding more).
            Models saved before this argument existed had their own embeddings in every mode: load such a
            `joint` model with `lfe_own_embeddings=True`.
    """

    model_type = "latent_feedback"

    def __init__(
        self,
        lfe_layers: int | None = None,
        feedback_layers: Sequence[int] | None = None,
        lfe_mode: str = "joint",
        lfe_pretrained_from: str | None = None,
        share_lfe_parameters: bool = False,
        lfe_own_embeddings: bool | None = None,
        **kwargs,
    ):
        self.lfe_layers = lfe_layers
        # Anything but a list or tuple is kept as given, for check_arguments to refuse by name.
        self.feedback_layers = list(feedback_layers) if isinstance(feedback_layers, (list, tuple)) else feedback_layers
        self.lfe_mode = lfe_mode
        self.lfe_pretrained_from = lfe_pretrained_from
        self.share_lfe_parameters = share_lfe_parameters
        self.lfe_own_embeddings = lfe_own_embeddings
        super().__init__(**kwargs)

    @property
    def lfe_has_own_embeddings(self) -> bool:
        """Whether the (separate) LFE embeds the source with its own token embeddings."""
        if self.share_lfe_parameters:
            return False
        if self.lfe_own_embeddings is not None:
            return self.lfe_own_embeddings
        return self.lfe_mode != "joint"

    @property
    def latent_encoder_layers(self) -> int:
        """J: the number of LFE layers (the NMT encoder's own layers when they are shared)."""
        if self.share_lfe_parameters:
            return self.encoder_layers
        return self.lfe_layers if self.lfe_layers is not None else self.encoder_layers

    @property
    def gives_feedback(self) -> bool:
        """Whether any NMT layer gets feedback: layer i takes the LFE layers above it and the top layer none
        (`top_down_feedback`), so a one-layer encoder, or feedback at the top layer alone, gets none."""
        return any(layer + 1 < self.encoder_layers for layer in self.layers_with_feedback)

    @property
    def layers_with_feedback(self) -> list[int]:
        return list(self.feedback_layers) if self.feedback_layers is not None else list(range(self.encoder_layers))

    def check_arguments(self) -> None:
        super().check_arguments()
        check_choice("lfe_mode", self.lfe_mode, LFE_MODES)
        if not isinstance(self.share_lfe_parameters, bool):
            raise ValueError(f"`share_lfe_parameters` must be true or false, got {self.share_lfe_parameters!r}.")
        if self.lfe_own_embeddings is not None and not isinstance(self.lfe_own_embeddings, bool):
            raise ValueError(f"`lfe_own_embeddings` must be True, False or None, got {self.lfe_own_embeddings!r}.")
        if self.lfe_own_embeddings and self.share_lfe_parameters:
            raise ValueError("`share_lfe_parameters=True` makes the NMT encoder the LFE, so it cannot have "
                             "`lfe_own_embeddings=True`.")
        if self.lfe_mode == "frozen" and self.lfe_own_embeddings is False:
            raise ValueError("A `frozen` LFE needs its own embeddings (`lfe_own_embeddings` True or unset): the "
                             "NMT source embeddings train, which would change the frozen encoder's input.")
        if self.lfe_layers is not None:
            check_positive_int("lfe_layers", self.lfe_layers)
            if self.lfe_layers < self.encoder_layers:
                raise ValueError(f"`lfe_layers` ({self.lfe_layers}) must be at least `encoder_layers` "
                                 f"({self.encoder_layers}): layer i is fed the LFE layers above i (I <= J).")
            if self.share_lfe_parameters and self.lfe_layers != self.encoder_layers:
                raise ValueError("`share_lfe_parameters=True` uses the NMT encoder as the LFE, so `lfe_layers` must "
                                 f"be `encoder_layers` ({self.encoder_layers}) or unset, got {self.lfe_layers}.")
        if self.feedback_layers is not None:
            check_indices("feedback_layers", self.feedback_layers, self.encoder_layers, "encoder_layers")

        pretrained = self.lfe_mode in ("frozen", "fine_tuned")
        if pretrained and not self.lfe_pretrained_from:
            raise ValueError(f"`lfe_mode={self.lfe_mode!r}` uses a pre-trained LFE: set `lfe_pretrained_from` to the "
                             "denoising autoencoder (hf-srcfeat-pretrain-dae output).")
        if self.lfe_mode == "joint" and self.lfe_pretrained_from:
            raise ValueError("`lfe_mode='joint'` trains the LFE from scratch; use 'frozen' or 'fine_tuned' with "
                             f"`lfe_pretrained_from` ({self.lfe_pretrained_from!r}).")
        if self.share_lfe_parameters and self.lfe_mode == "frozen":
            raise ValueError("`share_lfe_parameters=True` cannot be `frozen`: the shared LFE is the NMT encoder.")


__all__ = ["LatentFeedbackConfig"]
