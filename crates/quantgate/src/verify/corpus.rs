//! Built-in texts for Gate 2: a tokenizer corpus that hits the hard cases (mixed scripts,
//! Korean/English sentences, whitespace runs, digits, accents, emoji, special-token strings
//! inside text) and a small retrieval set (queries with one matching document each, in English,
//! in Korean and across the two) for the vector check.

/// The tokenizer corpus. Texts are in NFC; non-normalized inputs are in [`NORMALIZATION_PROBES`].
pub const TOKENIZER_CORPUS: &[&str] = &[
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    " leading space",
    "trailing space ",
    "  two leading spaces",
    "tabs\tand\t\ttabs",
    "new\nlines\n\nand\r\nCRLF",
    "    indented code:\n\tif x == 1:\n\t\treturn x",
    "multiple     spaces     inside",
    "digits 0 1 12 123 1234 12345 123456 3.14159 1,000,000 2026-11-30",
    "Accents: café naïve résumé Ångström façade jalapeño",
    "Ünïcödé ÀÉÎÕÜ ß ø æ œ",
    "Emoji: 🚀 🦙🦙 😶‍🌫️ 👩‍👩‍👧‍👦 ✅ ❤️",
    "中文文本：我想在苹果工作。",
    "日本語のテキストとカタカナ、ひらがな。",
    "한국어 텍스트입니다.",
    "Русский текст и болгарски: нещо на Български",
    "العربية نص قصير",
    "עברית טקסט",
    "हिन्दी पाठ",
    "ភាសាខ្មែរ",
    "Ελληνικά κείμενο",
    "Mixed: English, 中文, русский, 🚀, and 123!",
    "Punctuation!!! ??? ... --- === ''' \"\"\" ``` ~~~",
    "Contractions: I'm, you're, he's, we'll, they'd, it's, can't, WON'T, I'M",
    "URLs https://example.com/path?query=1&b=2 and emails a.b@example.org",
    "snake_case camelCase PascalCase kebab-case SCREAMING_CASE",
    "<|endoftext|> inside text",
    "text with <|im_start|>user\nhello<|im_end|> markers",
    "[CLS] and [SEP] and [MASK] and [PAD] strings",
    "<s> and </s> and <unk> strings",
    // Korean and English in one sentence, as a Korean team's search index holds them.
    "검색 인덱스에 multilingual embedding 모델을 배포합니다.",
    "서울은 South Korea의 capital이며, 인구는 약 940만 명입니다.",
    "이 API는 JSON 형식으로 응답합니다 (response time < 200ms).",
    "a",
    "A",
    "!",
    " ",
    "\n",
];

/// Inputs that Unicode normalization (NFC/NFKC) changes. If the HF tokenizer normalizes and
/// llama.cpp does not, these cannot match: they are reported as a known limitation, not gated.
pub const NORMALIZATION_PROBES: &[&str] = &[
    "cafe\u{301} (decomposed e + combining acute)",
    "A\u{30a}ngstro\u{308}m decomposed",
    "ﬁ ligature and ｆｕｌｌｗｉｄｔｈ and ①",
];

/// Texts with a word longer than WordPiece's `max_input_chars_per_word` (100 in every BERT
/// tokenizer.json seen): HF makes such a word one `[UNK]`, llama.cpp splits it. Measured on
/// WordPiece vocabularies as a known limitation, not gated (docs/tokenizer-stress.md).
pub const LONG_WORD_PROBES: &[&str] = &[
    "sha512 cf83e1357eefb8bdf1542850d66d8007d620e4050b5715dc83f4a921d36ce9ce47d0d13c5d85f2b0ff8318d2877eec2f63b931bd47417a81a538327af927da3e",
];

/// A retrieval set: (query, index of its document in [`RETRIEVAL_DOCS`]).
pub const RETRIEVAL_QUERIES: &[(&str, usize)] = &[
    ("How do I bake bread at home?", 0),
    ("What is the capital of France?", 1),
    ("Which planet is known as the red planet?", 2),
    ("How does photosynthesis work?", 3),
    ("What is the best way to learn a programming language?", 4),
    ("How fast can a cheetah run?", 5),
    // Korean queries, and queries whose document is in the other language.
    ("한국의 수도는 어디인가요?", 6),
    ("김치는 어떻게 만드나요?", 7),
    ("How do I reset my password?", 8),
    ("서울 지하철 요금은 얼마인가요?", 9),
];

/// Documents of the retrieval set.
pub const RETRIEVAL_DOCS: &[&str] = &[
    "Mix flour, water, salt and yeast, let the dough rise, then bake it in a hot oven.",
    "Paris is the capital and largest city of France.",
    "Mars is often called the red planet because of iron oxide on its surface.",
    "Plants use sunlight, water and carbon dioxide to produce glucose and oxygen.",
    "Write small programs every day and read other people's code to learn to program.",
    "The cheetah is the fastest land animal, reaching about 100 kilometres per hour.",
    "서울은 대한민국의 수도이자 가장 큰 도시입니다.",
    "배추를 소금에 절인 뒤 고춧가루, 마늘, 젓갈로 양념하면 김치가 됩니다.",
    "비밀번호를 재설정하려면 로그인 화면에서 '비밀번호 찾기'를 누르세요.",
    "A subway ride in Seoul costs about 1,400 won with a transit card.",
];
