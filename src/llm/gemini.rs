//! The Gemini generateContent wire format. (Being built in part 2.)
