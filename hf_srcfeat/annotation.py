"""Old import path of the annotation modules, kept so that existing code keeps working: the data model is in
`annotated_sentence`, CoNLL-U in `conllu`, the cache in `annotation_cache`, the backends in `annotator`,
`annotator_stanza` and `annotator_spacy`, and choosing one by name in `annotators`."""

from .annotated_sentence import AnnotatedSentence, AnnotatedWord, check_text, multiword_spacing
from .annotation_cache import ANNOTATION_CACHE_ENV, AnnotationCache, AnnotationCacheError, default_cache_path
from .annotator import ANNOTATION_FORMAT, Annotator, join_sentence_roots
from .annotator_spacy import SpacyAnnotator
from .annotator_stanza import STANZA_DIR_ENV, STANZA_PROCESSORS, StanzaAnnotator, import_stanza
from .annotators import ANNOTATORS, annotator_from_settings, make_annotator
from .conllu import MISC_FACTOR_PREFIX, conllu_lines, misc_column, misc_factors, read_conllu, write_conllu
from .file_digests import file_digest
from .metrics.parse_accuracy import annotation_scores

__all__ = [
    "ANNOTATION_CACHE_ENV", "ANNOTATION_FORMAT", "ANNOTATORS", "MISC_FACTOR_PREFIX", "STANZA_DIR_ENV",
    "STANZA_PROCESSORS", "AnnotatedSentence", "AnnotatedWord", "AnnotationCache", "AnnotationCacheError",
    "Annotator", "SpacyAnnotator", "StanzaAnnotator", "annotation_scores", "annotator_from_settings",
    "check_text", "conllu_lines", "default_cache_path", "file_digest", "import_stanza", "join_sentence_roots",
    "make_annotator", "misc_column", "misc_factors", "multiword_spacing", "read_conllu", "write_conllu",
]
